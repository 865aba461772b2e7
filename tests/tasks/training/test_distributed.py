"""The torch.distributed backend on 2 CPU ranks (gloo, torch.multiprocessing spawn): one data-parallel step
equals the one-process step on the same batch for every aggregation, with several mini-batches, uneven
group counts and loose rows; the ranks agree afterwards; the gathered state dict loads strictly into a fresh
HF model; save and resume are bit-exact; a killed rank stops the others with one clear error in bounded time
and leaves no partial checkpoint. A tiny random Qwen2 built in code: no vLLM, nothing downloaded."""

import copy
import json
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from conftest import free_port
from transformers import AutoModelForCausalLM

from rlep.tasks.bench.update import model_config, synthetic_batch
from rlep.tasks.training.backend import LocalBackend
from rlep.tasks.training.backend_config import BackendConfig
from rlep.tasks.training.config import LossConfig, OptimizerConfig, TrainConfig
from rlep.tasks.training.policy import PolicySpec
from rlep.tasks.training.update import UpdateSettings

TINY = model_config("tiny")
AGGREGATIONS = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
# Adam's step is ~lr whatever the gradient, so parameters with a near-zero gradient (key biases: softmax ignores
# a shift) move by float noise times lr; 1e-4 keeps that noise well under the 1e-5 tolerance.
LR = 1e-4
UPDATE = dict(ppo_epochs=2, updates_per_epoch=2, micro_batch_size=2, horizon=9)


def _batch(seed=0):
    """5 prompt groups of 3 (uneven over 2 ranks), answers of 1..9 tokens, the last two rows loose (replayed)."""
    batch = synthetic_batch(5, 3, 4, 9, TINY.vocab_size, seed=seed, varied=True)
    batch.group[-2:] = -1
    batch.is_replay[-2:] = True
    return batch


def _spec(strategy="ddp", weights=TINY, **backend):
    config = BackendConfig(nproc=2, strategy=strategy, collective_timeout=15, **{"precision": "fp32", **backend})
    return PolicySpec(weights, OptimizerConfig(lr=LR), config, init_seed=5)


def _update(backend, aggregation, seed=0):
    return backend.update(
        _batch(seed),
        UpdateSettings(LossConfig(aggregation=aggregation), 1.0, **UPDATE),
        generator=torch.Generator().manual_seed(7),
    )


def _rank(rank, world, port, scenario, args, out):
    """One spawned rank: join the group, rank 0 runs `scenario` and saves its result, the others serve."""
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    torch.set_num_threads(1)
    from rlep.tasks.training import distributed

    distributed.init_distributed(BackendConfig(nproc=world, collective_timeout=15))
    assert "RANK" not in os.environ and "MASTER_ADDR" not in os.environ  # nothing left for a vLLM engine to join
    try:
        if rank == 0:
            try:
                result = scenario(*args)
            except Exception as err:  # the test asserts on the error rank 0 saw
                result = {"error": err, "type": type(err).__name__}
            with __import__("contextlib").suppress(distributed.DistributedError):
                distributed.stop_serving()
            torch.save(result, Path(out) / "result.pt")
        elif scenario is _killed_rank:
            _die_on_second_update(distributed)
            distributed.serve()
        else:
            distributed.serve()
    finally:
        if scenario is not _killed_rank:
            distributed.shutdown()


def _spawn(scenario, *args, tmp_path):
    """Run `scenario` on rank 0 of 2 spawned ranks; its result. Each rank is waited for on its own (a rank
    that dies on purpose must not make the harness kill rank 0 before it reports)."""
    context = mp.spawn(_rank, args=(2, free_port(), scenario, args, str(tmp_path)), nprocs=2, join=False)
    for process in context.processes:
        process.join(timeout=120)
    alive = [p.pid for p in context.processes if p.is_alive()]
    for process in context.processes:
        if process.is_alive():
            process.kill()
    assert not alive, f"ranks still running after 120 s: {alive}"
    return torch.load(tmp_path / "result.pt", weights_only=False)


# ---------------------------------------------------------------------- scenarios (rank 0)


def _equal_steps(strategy, aggregations):
    from rlep.tasks.training.distributed import DistributedBackend

    results = {}
    for aggregation in aggregations:
        backend = DistributedBackend.lead(_spec(strategy))
        metrics = _update(backend, aggregation)
        results[aggregation] = {
            "metrics": metrics,
            "weights": copy.deepcopy(backend.full_state_dict()),
            "digests": backend.replica_digests(),
            "memory": backend.memory(),
        }
        backend.close()
    if strategy == "fsdp2":  # bf16 compute (float32 master weights) with activation checkpointing
        backend = DistributedBackend.lead(_spec(strategy, precision="bf16", activation_checkpointing=True))
        results["bf16"] = {
            "metrics": _update(backend, "token-mean"),
            "weights": copy.deepcopy(backend.full_state_dict()),
        }
        backend.close()
    return results


def _save_and_resume(strategy, out, precision="fp32", weight_dtype=torch.float32):
    """Train, write checkpoint step-1 as the trainer does (HF export, each rank's shards, trainer_state.pt),
    train on ("straight"); then a fresh policy resumed from the checkpoint trains on the same batch."""
    from rlep.tasks.training.checkpoint import load_trainer_state, save_checkpoint
    from rlep.tasks.training.distributed import DistributedBackend

    first = DistributedBackend.lead(_spec(strategy, precision=precision))
    _update(first, "token-mean", seed=0)
    state = {**first.training_state(), "rng": first.rng_state()}
    saved = save_checkpoint(Path(out), 1, first, _NoTokenizer(), state, weight_dtype=weight_dtype)
    masters = copy.deepcopy(first.full_state_dict())  # the float32 weights the checkpoint was written from
    _update(first, "token-mean", seed=1)
    straight = copy.deepcopy(first.full_state_dict())
    first.close()

    state = load_trainer_state(saved)
    resumed = DistributedBackend.lead(_spec(strategy, weights=str(saved), precision=precision))
    resumed.load_training_state(state)
    resumed.load_rng_state(state["rng"])
    _update(resumed, "token-mean", seed=1)
    again = resumed.full_state_dict()
    resumed.close()
    return {"straight": straight, "resumed": again, "lr": resumed.lr(), "checkpoint": str(saved), "masters": masters}


def _killed_rank(directory):
    from rlep.tasks.training.checkpoint import save_checkpoint
    from rlep.tasks.training.distributed import DistributedBackend

    backend = DistributedBackend.lead(_spec("fsdp2"))
    _update(backend, "token-mean")
    start = time.monotonic()
    try:
        _update(backend, "token-mean")  # rank 1 dies on receiving it
    except Exception as err:
        error = err
    elapsed = time.monotonic() - start
    try:  # the checkpoint after a lost rank: nothing may appear
        save_checkpoint(Path(directory), 2, backend, _NoTokenizer(), {"step": 2})
        saved = "written"
    except Exception as err:
        saved = type(err).__name__
    return {"error": error, "seconds": elapsed, "saved": saved}


class _NoTokenizer:
    def save_pretrained(self, directory):
        pass


def _die_on_second_update(distributed):
    calls = []
    original = distributed.DistributedBackend._follow_update

    def follow_update(self, *args):
        calls.append(1)
        if len(calls) == 2:
            os._exit(1)  # a rank killed mid-run
        return original(self, *args)

    distributed.DistributedBackend._follow_update = follow_update


# ---------------------------------------------------------------------- tests


def _one_process(aggregation):
    backend = LocalBackend(PolicySpec(TINY, OptimizerConfig(lr=LR), BackendConfig(precision="fp32"), init_seed=5))
    metrics = _update(backend, aggregation)
    return metrics, backend.full_state_dict()


@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_one_distributed_step_equals_the_one_process_step(strategy, tmp_path):
    results = _spawn(_equal_steps, strategy, AGGREGATIONS, tmp_path=tmp_path)
    for aggregation in AGGREGATIONS:
        want_metrics, want_weights = _one_process(aggregation)
        got = results[aggregation]
        for name in ("loss", "grad_norm", "entropy", "clip_frac_high", "logprob_mismatch", "is_ratio_mean"):
            assert got["metrics"][name] == pytest.approx(want_metrics[name], abs=1e-5), (aggregation, name)
        assert got["metrics"]["optimizer_updates"] == want_metrics["optimizer_updates"] == 4
        assert got["metrics"]["tokens_trained"] == want_metrics["tokens_trained"]
        moved = max((want_weights[k] - TINY_INIT[k]).abs().max().item() for k in want_weights)
        assert moved > 1e-4  # the step moved the weights, so agreeing to 1e-5 says something
        for name, value in want_weights.items():
            assert torch.allclose(got["weights"][name], value, atol=1e-5, rtol=0), (aggregation, name)
        assert len(set(got["digests"])) == 1  # the ranks hold the same policy
    if strategy == "fsdp2":
        want_metrics, want_weights = _one_process("token-mean")
        bf16 = results["bf16"]
        assert bf16["metrics"]["loss"] == pytest.approx(want_metrics["loss"], rel=0.05, abs=1e-4)
        assert bf16["metrics"]["grad_norm"] == pytest.approx(want_metrics["grad_norm"], rel=0.05)
        assert all(v.dtype == torch.float32 for v in bf16["weights"].values())  # master weights stay float32
        # the update's direction: bf16's weight change against float32's, over all parameters
        moved_bf16 = torch.cat([(bf16["weights"][k] - TINY_INIT[k]).flatten() for k in want_weights])
        moved_fp32 = torch.cat([(v - TINY_INIT[k]).flatten() for k, v in want_weights.items()])
        assert torch.nn.functional.cosine_similarity(moved_bf16, moved_fp32, dim=0) > 0.9
    fresh = AutoModelForCausalLM.from_config(TINY)
    fresh.load_state_dict(results["token-mean"]["weights"], strict=True)
    state = [m["param_bytes"] + m["optimizer_bytes"] for m in results["token-mean"]["memory"]]
    full = 3 * 4 * sum(v.numel() for v in TINY_INIT.values() if v is not TINY_INIT.get("lm_head.weight"))
    assert state[0] == pytest.approx(full / (2 if strategy == "fsdp2" else 1), rel=0.05)


def test_save_and_resume_are_bit_exact(tmp_path):
    results = _spawn(_save_and_resume, "fsdp2", tmp_path / "run", tmp_path=tmp_path)
    for name, value in results["straight"].items():
        assert torch.equal(results["resumed"][name], value), name
    loaded = AutoModelForCausalLM.from_pretrained(results["checkpoint"])  # a plain HF model, for eval and collect
    assert sum(p.numel() for p in loaded.parameters()) == sum(
        p.numel() for p in AutoModelForCausalLM.from_config(TINY).parameters()
    )


def test_the_hf_export_is_in_the_engines_dtype_and_the_resume_reads_the_float32_masters(tmp_path):
    """A bf16 run with a bf16 engine: the checkpoint's HF model (for evaluation, collection, serving and the
    resumed run's engine) is the float32 masters rounded to bf16, as a weight sync would send them, and its config
    says bfloat16; a resume reads the masters from the shards, so it goes on exactly."""
    from safetensors.torch import load_file

    results = _spawn(_save_and_resume, "fsdp2", tmp_path / "run", "bf16", torch.bfloat16, tmp_path=tmp_path)
    for name, value in results["straight"].items():
        assert torch.equal(results["resumed"][name], value), name
    checkpoint = Path(results["checkpoint"])
    exported = load_file(checkpoint / "model.safetensors")
    assert {value.dtype for value in exported.values()} == {torch.bfloat16}
    for name, value in exported.items():
        assert torch.equal(value, results["masters"][name].to(torch.bfloat16)), name
    assert json.loads((checkpoint / "config.json").read_text())["dtype"] == "bfloat16"
    assert AutoModelForCausalLM.from_pretrained(checkpoint).dtype == torch.bfloat16


def test_a_sharded_checkpoint_holds_each_ranks_shards_and_resumes_in_one_process(tmp_path):
    """Under FSDP2 each of 2 ranks writes its own half of the weights and AdamW moments (DCP; nothing gathered,
    trainer_state.pt holds no optimizer), and one process goes on from those shards (DCP reshards 2 -> 1): the
    same update as the 2 ranks' to float32 reduction noise, from the float32 masters."""
    from rlep.tasks.training.checkpoint import TRAINER_STATE_FILE, load_trainer_state
    from rlep.tasks.training.sharded_checkpoint import SHARDED_DIR

    results = _spawn(_save_and_resume, "fsdp2", tmp_path / "run", tmp_path=tmp_path)
    checkpoint = Path(results["checkpoint"])
    shards = sorted((checkpoint / SHARDED_DIR).glob("*.distcp"))
    sizes = [p.stat().st_size for p in shards]
    full = 3 * 4 * sum(v.numel() for k, v in TINY_INIT.items() if k != "lm_head.weight")  # weights + 2 moments
    # each rank about half (DCP adds per-tensor records and writes the tied head under its own name too)
    assert len(shards) == 2 and all(0.4 < size / sum(sizes) < 0.6 and size < 0.75 * full for size in sizes), sizes
    assert (checkpoint / TRAINER_STATE_FILE).stat().st_size < full / 10  # no optimizer in rank 0's file
    state = load_trainer_state(checkpoint)
    assert "optimizer" not in state and state["world_size"] == 2

    one = LocalBackend(PolicySpec(str(checkpoint), OptimizerConfig(lr=LR), BackendConfig(precision="fp32")))
    one.load_training_state(state)
    _update(one, "token-mean", seed=1)
    assert one.lr() == pytest.approx(results["lr"])
    for name, value in results["straight"].items():
        assert torch.allclose(one.full_state_dict()[name], value, atol=1e-5, rtol=0), name


def test_a_killed_rank_stops_the_others_with_one_clear_error(tmp_path):
    results = _spawn(_killed_rank, tmp_path / "run", tmp_path=tmp_path)
    from rlep.tasks.training.distributed import DistributedError

    assert isinstance(results["error"], DistributedError), results["error"]
    assert "another training process stopped" in str(results["error"]) and "--resume" in str(results["error"])
    print(f"rank 0 stopped {results['seconds']:.1f} s after rank 1 died")
    assert results["seconds"] < 30  # bounded by the 15 s collective timeout, not a hang
    assert results["saved"] == "DistributedError"
    left = [p.relative_to(tmp_path) for p in (tmp_path / "run").rglob("*") if p.is_file() or "step-" in p.name]
    assert left == []  # no partial checkpoint (only the empty checkpoints folder)


TINY_INIT = LocalBackend(PolicySpec(TINY, OptimizerConfig(), init_seed=5)).full_state_dict()


def test_several_processes_need_the_engine_in_its_own_process():
    from rlep.tasks.training.config import TrainConfig

    with pytest.raises(ValueError, match="needs mode async"):
        TrainConfig(backend={"nproc": 2})
    with pytest.raises(ValueError, match="ranks use GPUs 0..1"):
        TrainConfig(backend={"nproc": 2}, mode="async", generator_gpus=[1])
    TrainConfig(backend={"nproc": 2}, mode="async", max_staleness=0)


def test_each_rank_starts_at_tasks_training_launch():
    """The launch (torchrun command, Ray actors' entry point, each rank's main) lives in tasks/training/launch.py;
    tasks/training/distributed.py keeps the backend and stays under 400 lines."""
    import subprocess
    import sys

    import rlep.tasks.training.distributed as distributed
    from rlep.tasks.training import launch

    assert not hasattr(distributed, "main") and not hasattr(distributed, "train_distributed")
    assert callable(launch.main) and callable(launch.train_distributed)
    assert len(Path(distributed.__file__).read_text().splitlines()) < 400
    done = subprocess.run(
        [sys.executable, "-m", "rlep.tasks.training.launch", "--help"], capture_output=True, text=True, check=True
    )
    assert "python -m rlep.tasks.training.launch" in done.stdout and "--config" in done.stdout


def _small_distributed_run(model: str) -> list[str]:
    return [
        "train",
        "--no-prefect",
        "--model",
        model,
        "--strategy",
        "ddp",
        "--mode",
        "async",
        "--max-staleness",
        "0",
        "--prompts-per-step",
        "2",
        "--mini-batch-prompts",
        "1",
        "--samples-per-prompt",
        "4",
        "--max-tokens",
        "8",
        "--eval-every",
        "0",
        "--eval-problems-limit",
        "4",
        "--save-every",
        "1",
        "--overlong-buffer",
        "6",
        "--lr",
        "1e-3",
    ]


def _rlep(*args: str) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "rlep.flows.cli", *args],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.mark.slow
def test_rlep_train_nproc_2_trains_saves_and_resumes(fixture_model, tmp_path):
    """`rlep train --nproc 2` end to end: torchrun, rank 0's generator process, DDP update, checkpoints a plain HF
    model loads, then --resume at the same world size."""
    import pyarrow.parquet as pq

    out = tmp_path / "run"
    _rlep(*_small_distributed_run(fixture_model), "--nproc", "2", "--steps", "2", "--out", str(out))
    _rlep("train", "--no-prefect", "--resume", str(out), "--steps", "3")
    metrics = pq.read_table(out / "metrics.parquet").to_pylist()
    assert [row["step"] for row in metrics] == [1, 2, 3] and all(row["optimizer_updates"] == 2 for row in metrics)
    AutoModelForCausalLM.from_pretrained(out / "checkpoints" / "step-3")


@pytest.mark.slow
def test_ranks_as_ray_actors_then_resumed_at_another_world_size(fixture_model, tmp_path):
    """`--launcher ray`: 2 ranks as actors of a local Ray form the process group and train; the run then resumes
    under torchrun on 3 ranks (DCP reshards the checkpoint's shards), its weights going on from the
    checkpoint's."""
    import json

    import pyarrow.parquet as pq
    from safetensors.torch import load_file

    out = tmp_path / "run"
    _rlep(
        *_small_distributed_run(fixture_model), "--nproc", "2", "--launcher", "ray", "--steps", "2", "--out", str(out)
    )
    saved = json.loads((out / "train_config.json").read_text())
    assert saved["backend"]["launcher"] == "ray" and saved["backend"]["nproc"] == 2
    before = load_file(out / "checkpoints" / "step-2" / "model.safetensors")
    _rlep("train", "--no-prefect", "--resume", str(out), "--steps", "3", "--nproc", "3", "--launcher", "torchrun")
    metrics = pq.read_table(out / "metrics.parquet").to_pylist()
    assert [row["step"] for row in metrics] == [1, 2, 3] and all(row["optimizer_updates"] == 2 for row in metrics)
    states = {s: torch.load(out / "checkpoints" / f"step-{s}" / "trainer_state.pt", weights_only=False) for s in (2, 3)}
    assert (states[2]["world_size"], states[3]["world_size"]) == (2, 3)
    after = load_file(out / "checkpoints" / "step-3" / "model.safetensors")
    assert before.keys() == after.keys() and any(not torch.equal(before[k], after[k]) for k in before)
    assert max((before[k] - after[k]).abs().max().item() for k in before) < 0.05  # one small step on, not a restart
    AutoModelForCausalLM.from_pretrained(out / "checkpoints" / "step-3")


def test_rank_environments_number_ranks_per_node():
    from rlep.tasks.training.ray_launch import rank_environments

    envs = rank_environments([("a", "10.0.0.1"), ("a", "10.0.0.1"), ("b", "10.0.0.2")], 29500, one_gpu_each=False)
    assert [(e["RANK"], e["LOCAL_RANK"], e["LOCAL_WORLD_SIZE"]) for e in envs] == [
        ("0", "0", "2"),
        ("1", "1", "2"),
        ("2", "0", "1"),
    ]
    assert {e["MASTER_ADDR"] for e in envs} == {"10.0.0.1"} and {e["WORLD_SIZE"] for e in envs} == {"3"}
    on_gpus = rank_environments([("a", "h"), ("a", "h")], 1, one_gpu_each=True)
    assert [e["LOCAL_RANK"] for e in on_gpus] == ["0", "0"]  # Ray shows each actor only its own GPU


def test_launcher_ray_refuses_generator_gpus():
    with pytest.raises(ValueError, match="not supported with backend.launcher ray"):
        TrainConfig(backend={"nproc": 2, "launcher": "ray"}, mode="async", generator_gpus=[2])


# ---------------------------------------------------------------------- one bf16 meaning (issue 35 item 3d)

BF16_STEPS = 2  # updates of UPDATE's 4 optimizer steps each


def _bf16_run(backend):
    """BF16_STEPS updates: each update's loss and gradient norm, then the weights."""
    metrics = [_update(backend, "token-mean", seed=seed) for seed in range(BF16_STEPS)]
    result = {name: [m[name] for m in metrics] for name in ("loss", "grad_norm")}
    return {**result, "weights": copy.deepcopy(backend.full_state_dict())}


def _bf16_steps():
    from rlep.tasks.training.distributed import DistributedBackend

    results = {}
    for strategy in ("ddp", "fsdp2"):
        backend = DistributedBackend.lead(_spec(strategy, precision="bf16"))
        results[strategy] = _bf16_run(backend)
        backend.close()
    return results


def _change(weights):
    return torch.cat([(v - TINY_INIT[k]).flatten() for k, v in sorted(weights.items())])


def test_bf16_means_the_same_for_one_process_ddp_and_fsdp2(tmp_path):
    """precision bf16 is one mechanism for every strategy (autocast over float32 master weights, float32
    reductions). DDP and FSDP2 on the same 2 ranks run the same micro-batches, so they agree to float32
    reduction noise after 8 AdamW steps: loss and gradient norm to 1e-4 (relative), the weight change to 1e-3 of
    its size (FSDP2 with bf16 weights gathered, the old mechanism, read 2.5e-2). One process runs other
    micro-batch shapes, and bf16 rounds those differently: it agrees to 5e-3 on loss and gradient norm and to
    0.1 of the weight change, the size of the gap between bf16 and float32 itself."""
    got = _spawn(_bf16_steps, tmp_path=tmp_path)
    ddp, fsdp2 = got["ddp"], got["fsdp2"]
    one = _bf16_run(
        LocalBackend(PolicySpec(TINY, OptimizerConfig(lr=LR), BackendConfig(precision="bf16"), init_seed=5))
    )
    for name in ("loss", "grad_norm"):
        assert fsdp2[name] == pytest.approx(ddp[name], rel=1e-4), name
        assert ddp[name] == pytest.approx(one[name], rel=5e-3), name
    for run in (ddp, fsdp2):
        assert all(v.dtype == torch.float32 for v in run["weights"].values())  # master weights stay float32
    size = _change(one["weights"]).norm()
    assert size > 0
    strategies_gap = ((_change(fsdp2["weights"]) - _change(ddp["weights"])).norm() / size).item()
    one_gap = ((_change(ddp["weights"]) - _change(one["weights"])).norm() / size).item()
    print(f"weight change: fsdp2 vs ddp {strategies_gap:.2e}, ddp vs one process {one_gap:.2e}")
    assert strategies_gap < 1e-3 and one_gap < 0.1


# ---------------------------------------------------------------------- the KL reference (issue 35 item 3b)


def _with_reference(reference):
    """A KL step under FSDP2 in float32, then in bf16: metrics, weights and the reference's bytes on rank 0."""
    from rlep.tasks.training.distributed import DistributedBackend

    results = {}
    for precision in ("fp32", "bf16"):
        backend = DistributedBackend.lead(replace(_spec("fsdp2", precision=precision), reference=reference))
        metrics = _update_kl(backend)
        tensors = [p.to_local() if hasattr(p, "to_local") else p for p in backend.reference.parameters()]
        tensors = list({t.data_ptr(): t for t in tensors}.values())  # the tied head shares the embedding's storage
        results[precision] = {
            "metrics": metrics,
            "weights": copy.deepcopy(backend.full_state_dict()),
            "reference_bytes": sum(t.numel() * t.element_size() for t in tensors),
            "reference_dtypes": {t.dtype for t in tensors},
        }
        backend.close()
    return results


def _update_kl(backend):
    settings = UpdateSettings(LossConfig(kl_coef=0.5), 1.0, **UPDATE)
    return backend.update(_batch(), settings, generator=torch.Generator().manual_seed(7))


def test_the_kl_reference_is_sharded_like_the_policy_and_kept_in_the_compute_dtype(tmp_path):
    """FSDP2 shards the reference over the ranks (half its bytes on rank 0) and keeps it in bf16 under bf16;
    in float32 the KL step equals one process's (loss, KL, weights within 1e-5)."""
    reference = tmp_path / "reference"
    AutoModelForCausalLM.from_config(TINY).save_pretrained(reference)  # other weights than the policy's
    results = _spawn(_with_reference, str(reference), tmp_path=tmp_path)
    spec = PolicySpec(TINY, OptimizerConfig(lr=LR), BackendConfig(precision="fp32"), str(reference), init_seed=5)
    one = LocalBackend(spec)
    want = _update_kl(one)
    full = sum(p.numel() for p in one.reference.parameters())
    fp32, bf16 = results["fp32"], results["bf16"]
    assert want["kl"] > 0 and fp32["metrics"]["kl"] == pytest.approx(want["kl"], abs=1e-5)
    assert fp32["metrics"]["loss"] == pytest.approx(want["loss"], abs=1e-5)
    for name, value in one.full_state_dict().items():
        assert torch.allclose(fp32["weights"][name], value, atol=1e-5, rtol=0), name
    # rank 0 holds half of the reference's float32 bytes after its forwards (0.59 before the root was resharded
    # after each forward: FSDP2 keeps the root's embedding gathered for a backward the reference never runs);
    # bf16 halves that again
    assert fp32["reference_bytes"] == pytest.approx(0.5 * 4 * full, rel=0.01)
    assert bf16["reference_dtypes"] == {torch.bfloat16} and bf16["reference_bytes"] * 2 == fp32["reference_bytes"]
    assert bf16["metrics"]["kl"] == pytest.approx(want["kl"], rel=0.05)


def _streamed_weights():
    """FSDP2 after one update: the weights as weight sync streams them (bf16, one gathered tensor at a time), and
    the gathered full state dict."""
    from rlep.tasks.training.distributed import DistributedBackend

    backend = DistributedBackend.lead(_spec("fsdp2"))
    _update(backend, "token-mean")
    streamed = [(name, tensor.clone()) for name, tensor in backend.named_weights(torch.bfloat16)]
    full = copy.deepcopy(backend.full_state_dict())
    backend.close()
    return {"streamed": streamed, "full": full}


def test_fsdp2_streams_the_weights_one_gathered_tensor_at_a_time_in_the_engines_dtype(tmp_path):
    result = _spawn(_streamed_weights, tmp_path=tmp_path)
    streamed, full = result["streamed"], result["full"]
    assert [name for name, _ in streamed] == list(full)  # HF names, in state-dict order, every one
    for name, tensor in streamed:
        assert tensor.dtype == torch.bfloat16 and torch.equal(tensor, full[name].to(torch.bfloat16)), name


# ---------------------------------------------------------------------- the old-log-prob pass (issue 35)


def _every_rank(rank, world, port, scenario, args, out):
    """One spawned rank of a scenario every rank runs in full (no rank 0 driving): its result in result-RANK.pt."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        torch.save(scenario(rank, *args), Path(out) / f"result-{rank}.pt")
    finally:
        dist.destroy_process_group()
    _leave_without_teardown()


def _leave_without_teardown() -> None:
    """End a rank whose result is saved without the interpreter's teardown. A model sharded by FSDP2 keeps its
    gloo group alive past `destroy_process_group` and a garbage collection (its two `pt_gloo_runloop` threads
    stay, held outside Python; DDP's go), and that group destroyed at exit can abort the rank ("terminate called
    without an active exception", once in CI on 2 cores). A scenario's failure still raises before this."""
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _spawn_every_rank(scenario, *args, tmp_path):
    mp.spawn(_every_rank, args=(2, free_port(), scenario, args, str(tmp_path)), nprocs=2, join=True)
    return [torch.load(tmp_path / f"result-{rank}.pt", weights_only=False) for rank in range(2)]


def _old_logprob_pass(rank, strategy):
    """The no-grad old-log-prob pass on one process's whole batch, then sharded over the 2 ranks (`strategy`),
    with the rows of every forward counted (token_logprobs wrapped)."""
    from torch.nn.parallel import DistributedDataParallel

    from rlep.tasks.training import update
    from rlep.tasks.training.fsdp import shard_fsdp2
    from rlep.tasks.training.sharding import Sharding

    rows_seen: list[int] = []
    counted = update.token_logprobs

    def counting(model, input_ids, *args):
        rows_seen.append(len(input_ids))
        return counted(model, input_ids, *args)

    update.token_logprobs = counting
    torch.manual_seed(5)
    model = AutoModelForCausalLM.from_config(TINY, dtype=torch.float32).eval()
    batch = _batch()
    whole = update._logprobs(model, batch, 7, 1.0)
    whole_rows, rows_seen[:] = list(rows_seen), []
    if strategy == "fsdp2":
        shard_fsdp2(model)
    else:
        model = DistributedDataParallel(model)
    sharding = Sharding(rank, 2)
    sharded = update._logprobs(model, batch, 7, 1.0, data_parallel=sharding)
    own = len(sharding.rows(batch.group))
    mask = batch.mask.bool()  # completion tokens: the only ones the loss reads (past a row's end they are padding)
    return {"whole": whole[mask], "sharded": sharded[mask], "whole_rows": whole_rows, "rows": rows_seen, "own": own}


@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_the_old_logprob_pass_is_split_across_ranks_like_the_update(strategy, tmp_path):
    """Each rank's no-grad forward runs over its own shard's rows only (before: all 15 on every rank), padded to
    the same forward count; the old log-probs shared afterwards equal one process's within 1e-6 on every rank."""
    results = _spawn_every_rank(_old_logprob_pass, strategy, tmp_path=tmp_path)
    assert [r["own"] for r in results] == [8, 7]  # groups 0, 2, 4 (3 + 3 + 1 rows) and a loose row; 1, 3 and one
    for r in results:  # micro-batches of 7: one process 7 + 7 + 1 rows; rank 0 7 + 1, rank 1 7 + a padding row
        assert r["whole_rows"] == [7, 7, 1]
        assert r["rows"] == [7, 1]
        assert torch.allclose(r["sharded"], r["whole"], atol=1e-6, rtol=0)
        assert r["sharded"].abs().sum() > 0
        assert torch.allclose(r["sharded"], r["whole"], atol=1e-6, rtol=0)
        assert torch.equal(r["sharded"], results[0]["sharded"])  # every rank holds the same old log-probs


# ---------------------------------------------------------------------- built on the meta device, loaded once


def _loaded_once(weights):
    """Rank 0: DDP then FSDP2 policies (with the same weights as KL reference) from `weights`: their gathered
    state, replica digests, whether the head is still the embedding's parameter, and the same after an update."""
    from rlep.tasks.training.distributed import DistributedBackend

    results = {}
    for strategy in ("ddp", "fsdp2"):
        backend = DistributedBackend.lead(replace(_spec(strategy, weights=weights), reference=weights))
        module = backend.module
        loaded = copy.deepcopy(backend.full_state_dict())
        local = {k: v.to_local() if hasattr(v, "to_local") else v for k, v in backend.reference.state_dict().items()}
        _update(backend, "token-mean")
        results[strategy] = {
            "loaded": loaded,
            "reference": copy.deepcopy(local),  # rank 0's shards under FSDP2 (gathering needs every rank)
            "tied": module.lm_head.weight is module.model.embed_tokens.weight,
            "trained": copy.deepcopy(backend.full_state_dict()),
            "digests": backend.replica_digests(),
        }
        backend.close()
    return results


def _rank_counting_reads(rank, world, port, weights, out):
    """`_rank` with every read of weights on this rank recorded (safetensors files opened or loaded,
    from_pretrained) in reads-RANK.pt, and rank 0's load chunks made small (a few tensors each), their sizes in
    chunks-RANK.pt."""
    import safetensors
    import safetensors.torch
    import transformers

    from rlep.tasks.training import meta_load

    reads, chunks = [], []
    opened, load_file = safetensors.safe_open, safetensors.torch.load_file
    from_pretrained = transformers.AutoModelForCausalLM.from_pretrained
    read_chunks = meta_load.read_state_dict_chunks

    def counted(read):
        def call(path, *args, **kwargs):
            reads.append(str(path))
            return read(path, *args, **kwargs)

        return call

    def counted_chunks(*args, **kwargs):
        for chunk in read_chunks(*args, **kwargs):
            chunks.append(sum(t.numel() * t.element_size() for t in chunk.values()))
            yield chunk

    safetensors.safe_open, safetensors.torch.load_file = counted(opened), counted(load_file)
    transformers.AutoModelForCausalLM.from_pretrained = counted(from_pretrained)
    meta_load.LOAD_CHUNK_BYTES = 64 * 2**10  # the tiny model's embedding (64 KiB) alone, a layer or two a chunk
    meta_load.read_state_dict_chunks = counted_chunks
    _rank(rank, world, port, _loaded_once, (weights,), out)
    torch.save(reads, Path(out) / f"reads-{rank}.pt")
    torch.save(chunks, Path(out) / f"chunks-{rank}.pt")


def test_the_model_is_built_on_meta_and_loaded_once_from_rank_0(tmp_path):
    """DDP and FSDP2 ranks build the policy and the reference on the meta device and rank 0 alone reads the weight
    files (rank 1 opens none; before, every rank ran from_pretrained); the loaded weights equal a plain load's
    exactly, and the tied head stays the embedding's parameter, before and after an update."""
    weights = tmp_path / "model"
    torch.manual_seed(11)
    AutoModelForCausalLM.from_config(TINY).save_pretrained(weights)
    assert TINY.tie_word_embeddings
    plain = AutoModelForCausalLM.from_pretrained(weights, dtype=torch.float32).state_dict()
    context = mp.spawn(_rank_counting_reads, args=(2, free_port(), str(weights), str(tmp_path)), nprocs=2, join=False)
    for process in context.processes:
        process.join(timeout=180)
    assert all(p.exitcode == 0 for p in context.processes)
    results = torch.load(tmp_path / "result.pt", weights_only=False)
    assert "error" not in results, results
    assert torch.load(tmp_path / "reads-1.pt") == []  # rank 1 never opened a weight file
    assert len(torch.load(tmp_path / "reads-0.pt")) == 4  # rank 0: policy and reference, for each strategy
    # rank 0 held the weights a chunk at a time, never the whole state dict (a chunk over the limit is one tensor)
    chunks, whole = torch.load(tmp_path / "chunks-0.pt"), sum(t.numel() * t.element_size() for t in plain.values())
    assert len(chunks) >= 4 * 3 and max(chunks) < whole / 2 and torch.load(tmp_path / "chunks-1.pt") == []
    for strategy, got in results.items():
        assert set(got["loaded"]) == set(plain), strategy
        for name, value in plain.items():
            assert torch.equal(got["loaded"][name], value), (strategy, name)
            shard = value.chunk(2)[0] if strategy == "fsdp2" else value  # FSDP2: rank 0 holds the first rows
            assert torch.equal(got["reference"][name], shard), (strategy, name)
        assert got["tied"], strategy
        assert torch.equal(got["trained"]["lm_head.weight"], got["trained"]["model.embed_tokens.weight"])
        assert not torch.equal(got["trained"]["lm_head.weight"], plain["lm_head.weight"])  # the update moved it
        assert len(set(got["digests"])) == 1, strategy
