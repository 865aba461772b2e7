"""Part (b) of `rlep bench gpu`: one torchrun rank through the real distributed backend, on NCCL with FSDP2.

A world of one rank is the smallest run that goes through everything a multi-GPU run relies on: the process
group on NCCL (gloo on the CPU), `fully_shard` over one rank, the update's collectives with their tensors on
the rank's GPU (the metric sums: NCCL refuses CPU tensors, the bug tasks/training/backends/collectives.py fixed), the
weight-sync source (the streamed `named_weights` where the backend has it, else `full_state_dict`), the
checkpoint's save (`save_checkpoint`: the gathered HF export and, where the backend writes them, each rank's
DCP shards of weights and optimizer; the random streams) and a resume from it, both as the trainer does them.
NCCL refuses two ranks on one GPU, so this is also the most one GPU can run.

Steps: build a tiny random Qwen2 (tasks/bench/update.py's `tiny` shape) as `DistributedBackend.lead` does;
3 updates on synthetic rollouts (2 mini-batches each, so the old-log-prob pass runs too); the weight-sync
stream, compared tensor for tensor with the gathered state dict; `save_checkpoint`; one more update (the
straight run); a new backend from the checkpoint with its optimizer and random streams loaded, the same update
(the resumed run). Asserts: every loss and gradient norm finite, the weights moved, the streamed weights equal
the gathered ones, the resumed backend holds exactly the saved weights and its update lands where the straight
one did.

Run by `rlep bench gpu` through torchrun (`--request FILE`); the result is JSON in the request's `result` path.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

STEPS = 3
# Resumed and straight updates run the same kernels on the same inputs, deterministic ones on a GPU
# (`deterministic_cuda`): they should agree to the bit. A resume that lost the optimizer's moments lands ~lr away.
RESUME_TOLERANCE = 1e-5


def run_in_torchrun(work: Path, device: str) -> dict[str, Any]:
    """Launch this module as one torchrun rank and return its result (or the launch's failure)."""
    from rlep.tasks.training.backends.launch import launch

    work.mkdir(parents=True, exist_ok=True)
    request = work / "fsdp_request.json"
    result = work / "fsdp_result.json"
    request.write_text(json.dumps({"work": str(work), "device": device, "result": str(result)}))
    try:
        launch("rlep.tasks.bench.gpu_fsdp", ["--request", str(request)], 1)
    except Exception as err:  # torchrun's own failure (the rank's traceback is on stderr above)
        if not result.is_file():
            return {"status": "failed", "error": f"{type(err).__name__}: {err}"}
    return json.loads(result.read_text())


def _max_diff(a: dict, b: dict) -> float:
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def _update(backend, seed: int, vocab: int) -> dict[str, float]:
    import torch

    from rlep.tasks.bench.update import synthetic_batch
    from rlep.tasks.settings.train import LossConfig
    from rlep.tasks.training.maths.update import UpdateSettings

    batch = synthetic_batch(4, 4, 8, 16, vocab, seed=seed)
    settings = UpdateSettings(LossConfig(), 1.0, updates_per_epoch=2, micro_batch_size=4)
    return backend.update(batch, settings, generator=torch.Generator().manual_seed(7))


def _weight_sync(backend, gathered: dict) -> dict[str, Any]:
    """The engine's source of weights after a step: the stream where the backend has it (in bf16, as a bf16
    engine takes it), else the gathered state dict; checked against the gathered weights."""
    import torch

    if not hasattr(backend, "named_weights"):
        return {"source": "full_state_dict", "tensors": len(gathered), "max_abs_diff": 0.0}
    start = time.perf_counter()
    tensors, size, diff, devices = 0, 0, 0.0, set()
    for name, tensor in backend.named_weights(torch.bfloat16):
        tensors, size = tensors + 1, size + tensor.numel() * tensor.element_size()
        devices.add(str(tensor.device))
        expected = gathered[name].to(torch.bfloat16)
        diff = max(diff, float((tensor.cpu().float() - expected.float()).abs().max()))
    return {
        "source": "named_weights",
        "dtype": "bfloat16",
        "tensors": tensors,
        "bytes": size,
        "devices": sorted(devices),
        "max_abs_diff": diff,
        "seconds": time.perf_counter() - start,
    }


def scenario(work: Path) -> dict[str, Any]:
    """Rank 0 of a world of one: the steps of the module docstring; returns the facts and raises on a failed check."""
    import copy

    import torch
    import torch.distributed as dist

    from rlep.data.tokenizer import build_tokenizer
    from rlep.tasks.bench.update import model_config
    from rlep.tasks.settings.backend import Fsdp2Backend
    from rlep.tasks.settings.train import OptimizerConfig
    from rlep.tasks.training.backends.checkpoint import load_trainer_state, save_checkpoint
    from rlep.tasks.training.backends.distributed import DistributedBackend
    from rlep.tasks.training.backends.policy import PolicySpec

    hf = model_config("tiny")
    config = Fsdp2Backend(nproc=1, precision="auto", collective_timeout=120)
    spec = PolicySpec(hf, OptimizerConfig(lr=1e-3), config, init_seed=0)
    backend = DistributedBackend.lead(spec)
    facts: dict[str, Any] = {
        "backend": dist.get_backend(),
        "world_size": dist.get_world_size(),
        "strategy": "fsdp2",
        "device": str(backend.device),
        "precision": backend.precision.precision,
        "precision_reason": backend.precision.reason,
        "deterministic_kernels": torch.are_deterministic_algorithms_enabled(),
    }
    start = copy.deepcopy(backend.full_state_dict())
    metrics = [_update(backend, step, hf.vocab_size) for step in range(STEPS)]
    facts["losses"] = [m["loss"] for m in metrics]
    facts["grad_norms"] = [m["grad_norm"] for m in metrics]
    gathered = copy.deepcopy(backend.full_state_dict())
    facts["weights_changed_max_abs"] = _max_diff(gathered, start)
    facts["weight_sync"] = _weight_sync(backend, gathered)

    began = time.perf_counter()
    state = {"step": STEPS, **backend.training_state(), "rng": backend.rng_state()}
    checkpoint = save_checkpoint(work / "fsdp_run", STEPS, backend, build_tokenizer(), state)
    facts["checkpoint"] = {"path": str(checkpoint), "save_seconds": time.perf_counter() - began}
    _update(backend, STEPS, hf.vocab_size)
    straight = copy.deepcopy(backend.full_state_dict())
    facts["memory"] = backend.memory()[0]
    backend.close()

    began = time.perf_counter()
    resumed = DistributedBackend.lead(replace(spec, weights=str(checkpoint)))  # as a resumed run builds it
    saved = load_trainer_state(checkpoint)
    resumed.load_training_state(saved)  # sharded checkpoints (DCP): the weights and optimizer from the shards
    resumed.load_rng_state(saved["rng"])
    loaded = copy.deepcopy(resumed.full_state_dict())
    facts["checkpoint"]["load_seconds"] = time.perf_counter() - began
    facts["checkpoint"]["format"] = saved.get("format", "full")
    facts["checkpoint"]["files"] = sorted(str(p.relative_to(checkpoint)) for p in checkpoint.rglob("*") if p.is_file())
    facts["checkpoint"]["loaded_max_abs_diff"] = _max_diff(loaded, gathered)
    _update(resumed, STEPS, hf.vocab_size)
    facts["checkpoint"]["resumed_step_max_abs_diff"] = _max_diff(resumed.full_state_dict(), straight)
    resumed.close()

    failures = []
    if not all(math.isfinite(v) for v in facts["losses"] + facts["grad_norms"]):
        failures.append(f"a loss or gradient norm is not finite: {facts['losses']}, {facts['grad_norms']}")
    if not facts["weights_changed_max_abs"] > 0:
        failures.append("the updates did not change the weights")
    if facts["weight_sync"]["max_abs_diff"] != 0:
        failures.append(f"streamed weights differ from the gathered ones by {facts['weight_sync']['max_abs_diff']}")
    if facts["checkpoint"]["loaded_max_abs_diff"] != 0:
        failures.append(f"checkpoint weights load {facts['checkpoint']['loaded_max_abs_diff']} away from the saved")
    if not facts["checkpoint"]["resumed_step_max_abs_diff"] <= RESUME_TOLERANCE:
        failures.append(
            f"the resumed update lands {facts['checkpoint']['resumed_step_max_abs_diff']} from the straight one"
        )
    if failures:
        raise AssertionError("; ".join(failures) + f" (facts: {json.dumps(facts, default=str)})")
    return facts


def deterministic_cuda() -> None:
    """Deterministic kernels for the comparison of a resumed update with the straight one: AdamW moves a weight whose
    gradient is float noise (a key bias: softmax ignores a shift) by ~lr, so a nondeterministic kernel (the fused
    attention backwards accumulate with atomics) would read as a broken resume. cuBLAS needs its workspace setting
    before CUDA starts; attention runs in SDPA's math backend (plain matmuls and softmax) on this tiny model."""
    import torch

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    for backend in ("enable_flash_sdp", "enable_mem_efficient_sdp", "enable_cudnn_sdp"):
        if hasattr(torch.backends.cuda, backend):
            getattr(torch.backends.cuda, backend)(False)


def main(argv: list[str] | None = None) -> int:
    """One torchrun rank: join the group (NCCL on a GPU, gloo on the CPU), run the scenario, write the result."""
    parser = argparse.ArgumentParser(prog="python -m rlep.tasks.bench.gpu_fsdp")
    parser.add_argument("--request", type=Path, required=True)
    request = json.loads(parser.parse_args(argv).request.read_text())
    began = time.perf_counter()
    result: dict[str, Any] = {"status": "failed"}
    try:
        import torch

        if request["device"] == "cuda":
            if not torch.cuda.is_available():
                raise RuntimeError("device cuda asked for, but torch sees no GPU")
            deterministic_cuda()
        from rlep.tasks.settings.backend import Fsdp2Backend
        from rlep.tasks.training.backends.distributed import init_distributed, shutdown

        init_distributed(Fsdp2Backend(nproc=1, collective_timeout=120))
        try:
            result = {"status": "passed", **scenario(Path(request["work"]))}
        finally:
            shutdown()
    except Exception as err:
        traceback.print_exc()
        result = {**result, "status": "failed", "error": f"{type(err).__name__}: {err}"[:4000]}
    result["seconds_in_rank"] = time.perf_counter() - began
    Path(request["result"]).write_text(json.dumps(result, indent=2, default=str))
    return 0 if result["status"] == "passed" else 1


if __name__ == "__main__":
    sys.exit(main())
