"""`rlep bench sync` (`python -m rlep.tasks.bench.sync`): one weight sync, trainer -> engine: its extra host memory,
its speed, and its share of a training step.

A one-process policy (LocalBackend, float32) and an engine of `--engine-dtype` serving the same model; then
`--repeats` syncs, each measured as

- the peak resident set during the sync minus the resident set before it, in the trainer's process and (`--mode
  async`) in the generator process. The peak is the kernel's: VmHWM of /proc/PID/status, reset before each sync by
  writing 5 to /proc/PID/clear_refs (Linux), so no sampling is missed;
- its seconds, and GB/s = bytes of the weights sent (every tensor of the stream, in the engine's dtype; a tied
  weight counts under each of its names, as it is sent) / seconds. An async sync counts as done when a one-token
  request sent after the weights has been answered (the generator handles its messages in order), so its seconds
  include that request (a few ms on the tiny models: see `request_seconds`, the same request without a sync).
  The medians leave out the first sync, which warms vLLM's reload path up (seconds); the peaks keep it.

The sync's share of a step: with `--train-steps N` (default 6) a short real training run of this model in
`--mode` (`rlep train`'s defaults otherwise, no evaluation, no checkpoints, the bench's bucket and engine dtype)
runs in a fresh interpreter, and the share is the median over its steady steps (the first two and the last left
out) of `time_sync / time_step` from its metrics: the sync as the training loop times it, including any wait for
the generator to finish the request it is on. `--step-seconds S` instead takes a step's seconds measured elsewhere
(e.g. `rlep bench async`), divided into this bench's median isolated sync; the JSON's `step.source` says which.
The sync is whatever the code at hand does (`backend.named_weights` streamed, or the older `full_state_dict`
through torch.save), so the same file measures a checkout before a change. Writes bench/results/sync-<time>.json.

    rlep bench sync --model ~/.cache/rlep/models/smollm2-b179c9523d0e --mode async
    rlep bench sync --model ~/.cache/rlep/models/tiny-math-a88090e0a7e4 --train-steps 8
    python -m rlep.tasks.bench.sync --model ~/.cache/rlep/models/smollm2-b179c9523d0e --mode async
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlep.tasks.bench.flags import add_flags, parse

MIB = 1 << 20
STEADY_SKIP = 2  # first steps left out of a training run's medians (engine and allocator warm-up), as bench async


def _status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def _reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # the peak resident set (VmHWM) starts again from now


def measure(model: str, mode: str, engine_dtype: str, bucket_mb: int, repeats: int) -> dict:
    import torch

    from rlep.tasks.engines import make_engine
    from rlep.tasks.settings.engine import EngineConfig, SamplingConfig
    from rlep.tasks.settings.train import OptimizerConfig
    from rlep.tasks.training.backends.backend import LocalBackend
    from rlep.tasks.training.backends.policy import PolicySpec

    settings = {"backend": "vllm", "dtype": engine_dtype, "max_model_len": 256, "gpu_memory_utilization": 0.3}
    if "sync_bucket_mb" in EngineConfig.model_fields:
        settings["sync_bucket_mb"] = bucket_mb
    config = EngineConfig(**settings)
    backend = LocalBackend(PolicySpec(model, OptimizerConfig()))
    if mode == "sync":
        engine = make_engine(model, config)
    else:
        from rlep.tasks.training.generation.async_gen import GeneratorProcess

        engine = GeneratorProcess(model, config, version=0)
    streamed = hasattr(backend, "named_weights")
    greedy = SamplingConfig(temperature=0, max_tokens=1)
    pids = {"trainer": os.getpid(), **({"generator": engine.pid} if mode == "async" else {})}
    rows = []
    try:
        for version in range(1, repeats + 1):
            with torch.no_grad():
                for p in backend.model.parameters():
                    p.mul_(1.0 + 1e-3)  # new weights each time, as after an update
            before = {side: _status(pid, "VmRSS") for side, pid in pids.items()}
            for pid in pids.values():
                _reset_peak(pid)
            start = time.perf_counter()
            weights = backend.named_weights(engine.weight_dtype) if streamed else backend.full_state_dict()
            sent = Counted(weights)
            if mode == "sync":
                engine.load_weights(sent)
            else:
                engine.push_weights(sent, version)
                engine.generate(["1+1="], greedy)  # answered once the weights are in
            seconds = time.perf_counter() - start
            extra = {side: (_status(pid, "VmHWM") - before[side]) / MIB for side, pid in pids.items()}
            rows.append(
                {
                    "seconds": round(seconds, 4),
                    "bytes": sent.bytes,
                    "gb_per_s": round(sent.bytes / seconds / 1e9, 3),
                    **{f"{s}_extra_mib": round(v, 1) for s, v in extra.items()},
                }
            )
        request = None
        if mode == "async":  # what the one-token request after each sync costs alone
            start = time.perf_counter()
            engine.generate(["1+1="], greedy)
            request = round(time.perf_counter() - start, 4)
        transport = getattr(getattr(engine, "transport", None), "kind", None)  # before 2026-11-27: the socket
    finally:
        engine.close()
    params = backend.model.state_dict()
    warm = rows[1:] or rows  # the first sync warms the engine's reload path up (seconds): not in the medians
    seconds = statistics.median(r["seconds"] for r in warm)
    return {
        "settings": {"model": model, "mode": mode, "engine_dtype": engine_dtype, "bucket_mb": bucket_mb},
        "sync": "streamed (named_weights)" if streamed else "whole state dict (full_state_dict)",
        "transport": transport or ("socket (pickled buckets)" if mode == "async" else "in process"),
        "model_mib_float32": round(sum(t.numel() * t.element_size() for t in params.values()) / MIB, 1),
        "syncs": rows,
        "sync_seconds_median": round(seconds, 4),
        "medians_over": f"syncs 2 to {len(rows)} (the first warms up)" if len(rows) > 1 else "the one sync",
        "gb_per_s_median": round(statistics.median(r["gb_per_s"] for r in warm), 3),
        "gb_per_s_best": max(r["gb_per_s"] for r in rows),
        "request_seconds": request,
        "peak_extra_mib": {key: max(r[key] for r in rows) for key in rows[0] if key.endswith("_extra_mib")},
    }


class Counted:
    """A (name, tensor) stream passed through, counting the bytes of the tensors it gives."""

    def __init__(self, named: Any) -> None:
        self.named = named.items() if isinstance(named, dict) else named
        self.bytes = 0

    def __iter__(self):
        for name, tensor in self.named:
            self.bytes += tensor.numel() * tensor.element_size()
            yield name, tensor
            del tensor


def step_share(model: str, mode: str, engine_dtype: str, bucket_mb: int, train_steps: int, out: Path) -> dict[str, Any]:
    """A short training run of `model` in `mode` in a fresh interpreter (tasks/bench/async_train.py's runner); the
    medians of its steady steps' `time_sync`, `time_step` and of their ratio."""
    from rlep.tasks.bench.async_train import _run
    from rlep.tasks.settings.train import TrainConfig

    engine = {"dtype": engine_dtype, "sync_bucket_mb": bucket_mb}
    config = TrainConfig(model=model, mode=mode, steps=train_steps, eval_every=0, save_every=0, out=out, engine=engine)
    rows = _run(config)["rows"]
    steady = [r for r in rows if STEADY_SKIP < r["step"] < max(x["step"] for x in rows)]
    return {
        "source": f"training run ({mode}, {train_steps} steps, rlep train's defaults otherwise): medians over "
        f"steps {[r['step'] for r in steady]} of metrics time_sync and time_step",
        "step_seconds": round(statistics.median(r["time_step"] for r in steady), 4),
        "sync_seconds": round(statistics.median(r["time_sync"] for r in steady), 4),
        "sync_share": round(statistics.median(r["time_sync"] / r["time_step"] for r in steady), 4),
    }


class SyncBenchConfig(BaseModel):
    """Settings of the weight-sync memory bench (`measure`'s, and where its result goes)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="HF-format model directory (e.g. the converted SmolLM2).")
    mode: Literal["sync", "async"] = Field(
        "async", description="The engine in this process (sync) or in a generator process (async)."
    )
    engine_dtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="The engine's dtype; the weights are converted to it on the way."
    )
    bucket_mb: int = Field(128, ge=1, description="Size of one sync bucket in MiB.")
    repeats: int = Field(3, ge=1, description="Syncs measured; the peak is reported.")
    train_steps: int = Field(
        6,
        ge=0,
        description="Steps of a short training run of this model whose steady steps give the sync's share of a step "
        f"(the first {STEADY_SKIP} and the last left out, so at least {STEADY_SKIP + 2}); 0: no run.",
    )
    step_seconds: float | None = Field(
        None,
        gt=0,
        description="A step's seconds measured elsewhere (e.g. rlep bench async): the share is this bench's median "
        "sync over it. Only with --train-steps 0.",
    )
    results: Path = Field(Path("bench/results"), description="Directory for the JSON result.")

    @model_validator(mode="after")
    def _one_step_source(self) -> SyncBenchConfig:
        if 0 < self.train_steps < STEADY_SKIP + 2:
            raise ValueError(f"train_steps {self.train_steps}: 0, or at least {STEADY_SKIP + 2} (steady steps)")
        if self.train_steps and self.step_seconds is not None:
            raise ValueError("step_seconds is taken as given only with train_steps 0")
        return self


def run(config: SyncBenchConfig) -> dict:
    """Measure, write bench/results/sync-<time>.json, print the result; returns it."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    result = measure(config.model, config.mode, config.engine_dtype, config.bucket_mb, config.repeats)
    if config.train_steps:
        with tempfile.TemporaryDirectory(prefix="rlep-bench-sync-") as out:
            result["step"] = step_share(
                config.model, config.mode, config.engine_dtype, config.bucket_mb, config.train_steps, Path(out)
            )
    elif config.step_seconds is not None:
        result["step"] = {
            "source": "--step-seconds (measured elsewhere, taken as given); sync_seconds: this bench's median",
            "step_seconds": config.step_seconds,
            "sync_seconds": result["sync_seconds_median"],
            "sync_share": round(result["sync_seconds_median"] / config.step_seconds, 4),
        }
    else:
        result["step"] = {"source": "not measured (--train-steps 0, no --step-seconds)", "sync_share": None}
    from rlep.tasks.bench.report import write_bench_report

    path = write_bench_report("sync", config.results, **result)
    print(json.dumps(result, indent=2))
    print(f"written {path}")
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rlep.tasks.bench.sync", description=__doc__.split("\n")[0])
    add_flags(parser, SyncBenchConfig)
    run(parse(SyncBenchConfig, parser, argv))


if __name__ == "__main__":
    main()
