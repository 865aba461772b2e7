"""Checkpoints and weights of the torch.distributed backend on 2 CPU ranks: save and resume are bit-exact; the HF
export is in the engine's dtype while a resume reads the float32 masters; an FSDP2 checkpoint holds each rank's
shards and resumes in one process; a killed rank stops the others with one clear error in bounded time and leaves
no partial checkpoint; the model is built on the meta device and its weights read once, by rank 0."""

import copy
import json
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import free_port
from distributed_ranks import LR, TINY, TINY_INIT, NoTokenizer, rank_main, run_update, spawn, spec, start_ranks
from transformers import AutoModelForCausalLM

from rlep.tasks.settings.backend import backend_config
from rlep.tasks.settings.train import OptimizerConfig
from rlep.tasks.training.backends.backend import LocalBackend
from rlep.tasks.training.backends.policy import PolicySpec


def _save_and_resume(strategy, out, precision="fp32", weight_dtype=torch.float32):
    """Train, write checkpoint step-1 as the trainer does (HF export, each rank's shards, trainer_state.pt),
    train on ("straight"); then a fresh policy resumed from the checkpoint trains on the same batch."""
    from rlep.tasks.training.backends.checkpoint import load_trainer_state, save_checkpoint
    from rlep.tasks.training.backends.distributed import DistributedBackend

    first = DistributedBackend.lead(spec(strategy, precision=precision))
    run_update(first, "token-mean", seed=0)
    state = {**first.training_state(), "rng": first.rng_state()}
    saved = save_checkpoint(Path(out), 1, first, NoTokenizer(), state, weight_dtype=weight_dtype)
    masters = copy.deepcopy(first.full_state_dict())  # the float32 weights the checkpoint was written from
    run_update(first, "token-mean", seed=1)
    straight = copy.deepcopy(first.full_state_dict())
    first.close()

    state = load_trainer_state(saved)
    resumed = DistributedBackend.lead(spec(strategy, weights=str(saved), precision=precision))
    resumed.load_training_state(state)
    resumed.load_rng_state(state["rng"])
    run_update(resumed, "token-mean", seed=1)
    again = resumed.full_state_dict()
    resumed.close()
    return {"straight": straight, "resumed": again, "lr": resumed.lr(), "checkpoint": str(saved), "masters": masters}


def _killed_rank(directory):
    from rlep.tasks.training.backends.checkpoint import save_checkpoint
    from rlep.tasks.training.backends.distributed import DistributedBackend

    backend = DistributedBackend.lead(spec("fsdp2"))
    run_update(backend, "token-mean")
    start = time.monotonic()
    try:
        run_update(backend, "token-mean")  # rank 1 dies on receiving it
    except Exception as err:
        error = err
    elapsed = time.monotonic() - start
    try:  # the checkpoint after a lost rank: nothing may appear
        save_checkpoint(Path(directory), 2, backend, NoTokenizer(), {"step": 2})
        saved = "written"
    except Exception as err:
        saved = type(err).__name__
    return {"error": error, "seconds": elapsed, "saved": saved}


def _die_on_second_update(distributed):
    calls = []
    original = distributed.DistributedBackend._follow_update

    def follow_update(self, *args):
        calls.append(1)
        if len(calls) == 2:
            os._exit(1)  # a rank killed mid-run
        return original(self, *args)

    distributed.DistributedBackend._follow_update = follow_update


def test_save_and_resume_are_bit_exact(tmp_path):
    results = spawn(_save_and_resume, "fsdp2", tmp_path / "run", tmp_path=tmp_path)
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

    results = spawn(_save_and_resume, "fsdp2", tmp_path / "run", "bf16", torch.bfloat16, tmp_path=tmp_path)
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
    from rlep.tasks.training.backends.checkpoint import TRAINER_STATE_FILE, load_trainer_state
    from rlep.tasks.training.backends.sharded_checkpoint import SHARDED_DIR

    results = spawn(_save_and_resume, "fsdp2", tmp_path / "run", tmp_path=tmp_path)
    checkpoint = Path(results["checkpoint"])
    shards = sorted((checkpoint / SHARDED_DIR).glob("*.distcp"))
    sizes = [p.stat().st_size for p in shards]
    full = 3 * 4 * sum(v.numel() for k, v in TINY_INIT.items() if k != "lm_head.weight")  # weights + 2 moments
    # each rank about half (DCP adds per-tensor records and writes the tied head under its own name too)
    assert len(shards) == 2 and all(0.4 < size / sum(sizes) < 0.6 and size < 0.75 * full for size in sizes), sizes
    assert (checkpoint / TRAINER_STATE_FILE).stat().st_size < full / 10  # no optimizer in rank 0's file
    state = load_trainer_state(checkpoint)
    assert "optimizer" not in state and state["world_size"] == 2

    one = LocalBackend(PolicySpec(str(checkpoint), OptimizerConfig(lr=LR), backend_config(precision="fp32")))
    one.load_training_state(state)
    run_update(one, "token-mean", seed=1)
    assert one.lr() == pytest.approx(results["lr"])
    for name, value in results["straight"].items():
        assert torch.allclose(one.full_state_dict()[name], value, atol=1e-5, rtol=0), name


def test_a_killed_rank_stops_the_others_with_one_clear_error(tmp_path):
    results = spawn(_killed_rank, tmp_path / "run", tmp_path=tmp_path, follower=_die_on_second_update)
    from rlep.tasks.training.backends.distributed import DistributedError

    assert isinstance(results["error"], DistributedError), results["error"]
    assert "another training process stopped" in str(results["error"]) and "--resume" in str(results["error"])
    print(f"rank 0 stopped {results['seconds']:.1f} s after rank 1 died")
    assert results["seconds"] < 30  # bounded by the 15 s collective timeout, not a hang
    assert results["saved"] == "DistributedError"
    left = [p.relative_to(tmp_path) for p in (tmp_path / "run").rglob("*") if p.is_file() or "step-" in p.name]
    assert left == []  # no partial checkpoint (only the empty checkpoints folder)


# ---------------------------------------------------------------------- built on the meta device, loaded once


def _loaded_once(weights):
    """Rank 0: DDP then FSDP2 policies (with the same weights as KL reference) from `weights`: their gathered
    state, replica digests, whether the head is still the embedding's parameter, and the same after an update."""
    from rlep.tasks.training.backends.distributed import DistributedBackend

    results = {}
    for strategy in ("ddp", "fsdp2"):
        backend = DistributedBackend.lead(replace(spec(strategy, weights=weights), reference=weights))
        module = backend.module
        loaded = copy.deepcopy(backend.full_state_dict())
        local = {k: v.to_local() if hasattr(v, "to_local") else v for k, v in backend.reference.state_dict().items()}
        run_update(backend, "token-mean")
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

    from rlep.tasks.training.backends import meta_load

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
    rank_main(rank, world, port, _loaded_once, (weights,), out)
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
    context = start_ranks(_rank_counting_reads, (2, free_port(), str(weights), str(tmp_path)), join=False)
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
