"""The torch.distributed backend on 2 CPU ranks computes what one process does: one data-parallel step equals
the one-process step on the same batch for every aggregation, with several mini-batches, uneven group counts and
loose rows, and the ranks agree afterwards; bf16 means the same for one process, DDP and FSDP2; the KL reference is
sharded like the policy; FSDP2 streams the weights one gathered tensor at a time; the old-log-prob pass is split
across ranks like the update. The harness is distributed_ranks.py; checkpoints and loading are in
test_distributed_checkpoint.py, the launch in test_distributed_launch.py."""

import copy
import math
from dataclasses import replace

import pytest
import torch
from distributed_ranks import (
    LR,
    TINY,
    TINY_INIT,
    UPDATE,
    mixed_batch,
    run_update,
    spawn,
    spawn_every_rank,
    spec,
)
from transformers import AutoModelForCausalLM

from rlep.tasks.settings.backend import backend_config
from rlep.tasks.settings.train import LossConfig, OptimizerConfig
from rlep.tasks.training.backends.backend import LocalBackend
from rlep.tasks.training.backends.policy import PolicySpec
from rlep.tasks.training.maths.update import UpdateSettings

AGGREGATIONS = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


def _equal_steps(strategy, aggregations):
    from rlep.tasks.training.backends.distributed import DistributedBackend

    results = {}
    for aggregation in aggregations:
        backend = DistributedBackend.lead(spec(strategy))
        metrics = run_update(backend, aggregation)
        results[aggregation] = {
            "metrics": metrics,
            "weights": copy.deepcopy(backend.full_state_dict()),
            "digests": backend.replica_digests(),
            "memory": backend.memory(),
        }
        backend.close()
    if strategy == "fsdp2":  # bf16 compute (float32 master weights) with activation checkpointing
        backend = DistributedBackend.lead(spec(strategy, precision="bf16", activation_checkpointing=True))
        results["bf16"] = {
            "metrics": run_update(backend, "token-mean"),
            "weights": copy.deepcopy(backend.full_state_dict()),
        }
        backend.close()
    return results


def _one_process(aggregation):
    backend = LocalBackend(PolicySpec(TINY, OptimizerConfig(lr=LR), backend_config(precision="fp32"), init_seed=5))
    metrics = run_update(backend, aggregation)
    return metrics, backend.full_state_dict()


@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_one_distributed_step_equals_the_one_process_step(strategy, tmp_path):
    results = spawn(_equal_steps, strategy, AGGREGATIONS, tmp_path=tmp_path)
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


# ---------------------------------------------------------------------- one bf16 meaning (issue 35 item 3d)

BF16_STEPS = 2  # updates of UPDATE's 4 optimizer steps each


def _bf16_run(backend):
    """BF16_STEPS updates: each update's loss and gradient norm, then the weights."""
    metrics = [run_update(backend, "token-mean", seed=seed) for seed in range(BF16_STEPS)]
    result = {name: [m[name] for m in metrics] for name in ("loss", "grad_norm")}
    return {**result, "weights": copy.deepcopy(backend.full_state_dict())}


def _bf16_steps():
    from rlep.tasks.training.backends.distributed import DistributedBackend

    results = {}
    for strategy in ("ddp", "fsdp2"):
        backend = DistributedBackend.lead(spec(strategy, precision="bf16"))
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
    got = spawn(_bf16_steps, tmp_path=tmp_path)
    ddp, fsdp2 = got["ddp"], got["fsdp2"]
    one = _bf16_run(
        LocalBackend(PolicySpec(TINY, OptimizerConfig(lr=LR), backend_config(precision="bf16"), init_seed=5))
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
    from rlep.tasks.training.backends.distributed import DistributedBackend

    results = {}
    for precision in ("fp32", "bf16"):
        backend = DistributedBackend.lead(replace(spec("fsdp2", precision=precision), reference=reference))
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
    return backend.update(mixed_batch(), settings, generator=torch.Generator().manual_seed(7))


def test_the_kl_reference_is_sharded_like_the_policy_and_kept_in_the_compute_dtype(tmp_path):
    """FSDP2 shards the reference over the ranks (half its bytes on rank 0) and keeps it in bf16 under bf16;
    in float32 the KL step equals one process's (loss, KL, weights within 1e-5)."""
    reference = tmp_path / "reference"
    AutoModelForCausalLM.from_config(TINY).save_pretrained(reference)  # other weights than the policy's
    results = spawn(_with_reference, str(reference), tmp_path=tmp_path)
    one = LocalBackend(
        PolicySpec(TINY, OptimizerConfig(lr=LR), backend_config(precision="fp32"), str(reference), init_seed=5)
    )
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
    from rlep.tasks.training.backends.distributed import DistributedBackend

    backend = DistributedBackend.lead(spec("fsdp2"))
    run_update(backend, "token-mean")
    streamed = [(name, tensor.clone()) for name, tensor in backend.named_weights(torch.bfloat16)]
    full = copy.deepcopy(backend.full_state_dict())
    backend.close()
    return {"streamed": streamed, "full": full}


def test_fsdp2_streams_the_weights_one_gathered_tensor_at_a_time_in_the_engines_dtype(tmp_path):
    result = spawn(_streamed_weights, tmp_path=tmp_path)
    streamed, full = result["streamed"], result["full"]
    assert [name for name, _ in streamed] == list(full)  # HF names, in state-dict order, every one
    for name, tensor in streamed:
        assert tensor.dtype == torch.bfloat16 and torch.equal(tensor, full[name].to(torch.bfloat16)), name


# ---------------------------------------------------------------------- the old-log-prob pass (issue 35)


def _old_logprob_pass(rank, strategy):
    """The no-grad old-log-prob pass on one process's whole batch, then sharded over the 2 ranks (`strategy`),
    with the rows of every forward counted (token_logprobs wrapped)."""
    from torch.nn.parallel import DistributedDataParallel

    from rlep.tasks.training.backends.fsdp import shard_fsdp2
    from rlep.tasks.training.backends.sharding import Sharding
    from rlep.tasks.training.maths import update
    from rlep.tasks.training.maths.batch import row_lengths

    rows_seen: list[int] = []
    counted = update.token_logprobs

    def counting(model, input_ids, *args):
        rows_seen.append(len(input_ids))
        return counted(model, input_ids, *args)

    update.token_logprobs = counting
    torch.manual_seed(5)
    model = AutoModelForCausalLM.from_config(TINY, dtype=torch.float32).eval()
    batch = mixed_batch()
    whole = update._logprobs(model, batch, 7, 1.0)
    whole_rows, rows_seen[:] = list(rows_seen), []
    if strategy == "fsdp2":
        shard_fsdp2(model)
    else:
        model = DistributedDataParallel(model)
    sharding = Sharding(rank, 2)
    sharded = update._logprobs(model, batch, 7, 1.0, data_parallel=sharding)
    own = len(sharding.rows(batch.group, row_lengths(batch)))
    mask = batch.mask.bool()  # completion tokens: the only ones the loss reads (past a row's end they are padding)
    return {"whole": whole[mask], "sharded": sharded[mask], "whole_rows": whole_rows, "rows": rows_seen, "own": own}


@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_the_old_logprob_pass_is_split_across_ranks_like_the_update(strategy, tmp_path):
    """Each rank's no-grad forward runs over its own shard's rows only (before: all 15 on every rank), padded to
    the same forward count; the old log-probs shared afterwards equal one process's within 1e-6 on every rank."""
    results = spawn_every_rank(_old_logprob_pass, strategy, tmp_path=tmp_path)
    # dealt by tokens: groups 0, 3, 4 (3 + 3 + 1 rows) and a loose row (73 tokens); 1, 2 and the other one (66)
    assert [r["own"] for r in results] == [8, 7]
    for r in results:  # micro-batches of 7: one process 7 + 7 + 1 rows; rank 0 7 + 1, rank 1 7 + a padding row
        assert r["whole_rows"] == [7, 7, 1]
        assert r["rows"] == [7, 1]
        assert r["sharded"].abs().sum() > 0
        assert torch.allclose(r["sharded"], r["whole"], atol=1e-6, rtol=0)
        assert torch.equal(r["sharded"], results[0]["sharded"])  # every rank holds the same old log-probs


# ---------------------------------------------------------------- FSDP2 gathers in bf16 (issue 47 item 4e)


def _gathers_drift(rank, weights):
    """One step (two AdamW updates: the second sees ratios != 1) of the fixture model under FSDP2 on 2 ranks,
    gathering float32 weights, then bf16 ones: the old log-probs each computes, the step's metrics, and the updated
    weights (gathered whole)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    from rlep.tasks.bench.update import synthetic_batch
    from rlep.tasks.training.backends.fsdp import shard_fsdp2
    from rlep.tasks.training.backends.policy import build_optimizer
    from rlep.tasks.training.backends.sharding import Sharding
    from rlep.tasks.training.maths import update

    out = {}
    for dtype in ("float32", "bfloat16"):
        model = AutoModelForCausalLM.from_pretrained(weights, dtype=torch.float32).eval()
        batch = synthetic_batch(4, 4, 6, 12, model.config.vocab_size, seed=3, varied=True)
        shard_fsdp2(model, param_dtype=dtype)
        sharding = Sharding(rank, 2)
        optimizer, scheduler = build_optimizer(model.parameters(), OptimizerConfig(lr=1e-4))
        before = update._logprobs(model, batch, 4, 1.0, data_parallel=sharding)
        settings = UpdateSettings(LossConfig(), 1.0, updates_per_epoch=2, micro_batch_size=4, horizon=12)
        metrics = update.policy_update(model, optimizer, scheduler, batch, settings, data_parallel=sharding)
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        state = get_model_state_dict(model, options=options)
        gathered = {p.dtype for p in model.parameters()}  # the sharded (master) parameters
        out[dtype] = {"before": before[batch.mask.bool()], "metrics": metrics, "state": state, "masters": gathered}
    return out | {"batch": batch}


def test_fsdp2_bf16_gathers_are_an_option_whose_drift_from_float32_is_bf16s(fixture_model, tmp_path):
    """backend.fsdp_param_dtype bfloat16 (FSDP2's MixedPrecisionPolicy(param_dtype=bf16)) runs on 2 gloo CPU ranks:
    master weights stay float32; on the fixture model the log-probs, the step's loss and the log-probs after a step
    of two AdamW updates move from the float32 gathers' by bf16's rounding (measured here; docs/distributed.md)."""
    from rlep.tasks.training.maths.logprobs import token_logprobs

    rank0 = spawn_every_rank(_gathers_drift, fixture_model, tmp_path=tmp_path)[0]
    f32, b16 = rank0["float32"], rank0["bfloat16"]
    assert f32["masters"] == b16["masters"] == {torch.float32}
    before = (b16["before"] - f32["before"]).abs()
    batch = rank0["batch"]
    after = {}
    for dtype in ("float32", "bfloat16"):  # the updated weights, evaluated alike (float32)
        model = AutoModelForCausalLM.from_pretrained(fixture_model, dtype=torch.float32)
        model.load_state_dict(rank0[dtype]["state"])
        with torch.no_grad():
            after[dtype] = token_logprobs(model, batch.input_ids, batch.attention_mask)[0][batch.mask.bool()]
    moved = (after["float32"] - f32["before"]).abs().max().item()
    drift = (after["bfloat16"] - after["float32"]).abs().max().item()
    loss_gap = abs(b16["metrics"]["loss"] - f32["metrics"]["loss"])
    print(
        f"bf16 gathers vs float32: log-probs max |diff| {before.max().item():.2e} (mean {before.mean().item():.2e}); "
        f"step loss {f32['metrics']['loss']:.6f} vs {b16['metrics']['loss']:.6f}; grad norm "
        f"{f32['metrics']['grad_norm']:.5f} vs {b16['metrics']['grad_norm']:.5f}; after the step (float32 eval): "
        f"log-probs moved {moved:.2e}, apart {drift:.2e}"
    )
    assert 0 < before.max().item() < 5e-2  # bf16 rounds (it is not float32), by bf16's size (8 bits of mantissa)
    assert loss_gap < 1e-2 * max(1.0, abs(f32["metrics"]["loss"]))
    assert moved > 0 and drift < moved  # the step moved the policy more than bf16 moved the step


def _backend_gathers():
    """Through the backend: the dtype of a decoder layer's weight inside its forward, and of the masters."""
    from rlep.tasks.training.backends.distributed import DistributedBackend

    seen = {}
    backend = DistributedBackend.lead(spec("fsdp2", fsdp_param_dtype="bfloat16"))
    projection = backend.module.model.layers[0].mlp.up_proj  # inside its layer's forward: the gathered weight

    def record(module, args):  # returns None: the input stays its own
        seen.setdefault("gathered", module.weight.dtype)

    hook = projection.register_forward_pre_hook(record)
    metrics = run_update(backend, "token-mean")
    hook.remove()
    seen["masters"] = {p.dtype for p in backend.module.parameters()}
    backend.close()
    return seen | {"loss": metrics["loss"]}


def test_the_backend_gathers_in_the_dtype_it_is_given(tmp_path):
    got = spawn(_backend_gathers, tmp_path=tmp_path)
    assert got["gathered"] == torch.bfloat16 and got["masters"] == {torch.float32} and math.isfinite(got["loss"])
    with pytest.raises(ValueError, match="fsdp_param_dtype"):
        backend_config(fsdp_param_dtype="bfloat16")  # one process: nothing is gathered
    with pytest.raises(ValueError, match="fsdp_param_dtype"):
        backend_config(nproc=2, strategy="ddp", fsdp_param_dtype="bfloat16")


def _head_slices_under_fsdp2(rank, weights):
    """Every rank: the fixture model's log-probs through the head in slices of 2 tokens (each recomputed in the
    backward) under FSDP2, on the same input on both ranks, so the averaged gradient is one process's."""
    from rlep.tasks.training.backends.fsdp import shard_fsdp2
    from rlep.tasks.training.maths.logprobs import token_logprobs

    model = AutoModelForCausalLM.from_pretrained(weights, dtype=torch.float32)
    shard_fsdp2(model)
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(3, model.config.vocab_size, (3, 11), generator=g)
    mask = torch.ones_like(input_ids)
    mask[1, 7:] = 0
    logp, entropy = token_logprobs(model, input_ids, mask, 0.7, chunk_elements=3 * 2 * model.config.vocab_size)
    (logp * torch.linspace(-1, 1, logp.numel()).reshape(logp.shape) * mask[:, 1:]).sum().backward()
    grads = {n: p.grad.full_tensor() for n, p in model.named_parameters()}
    return {"logp": logp.detach(), "entropy": entropy, "grads": grads, "input_ids": input_ids, "mask": mask}


def test_fsdp2_takes_the_heads_slices_inside_its_forward_with_one_processes_gradients(fixture_model, tmp_path):
    """The head's slices run inside the root's forward (FSDP2 holds the head gathered there) and are recomputed in
    the backward; the reduced gradients equal one process's whole-logits gradients."""
    from rlep.tasks.training.maths.logprobs import logprobs_from_logits

    got = spawn_every_rank(_head_slices_under_fsdp2, fixture_model, tmp_path=tmp_path)[0]
    model = AutoModelForCausalLM.from_pretrained(fixture_model, dtype=torch.float32)
    input_ids, mask = got["input_ids"], got["mask"]
    logits = model(input_ids=input_ids, attention_mask=mask).logits[:, :-1]
    logp, entropy = logprobs_from_logits(logits, input_ids[:, 1:], 0.7)
    (logp * torch.linspace(-1, 1, logp.numel()).reshape(logp.shape) * mask[:, 1:]).sum().backward()
    torch.testing.assert_close(got["logp"], logp.detach(), rtol=0, atol=2e-5)
    torch.testing.assert_close(got["entropy"], entropy, rtol=0, atol=2e-5)
    for name, p in model.named_parameters():
        torch.testing.assert_close(got["grads"][name], p.grad, rtol=1e-4, atol=1e-6, msg=name)
