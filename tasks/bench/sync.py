"""`rlep bench sync` (`python -m rlep.tasks.bench.sync`): the extra host memory of one weight sync, trainer -> engine.

A one-process policy (LocalBackend, float32) and an engine of `--engine-dtype` serving the same model; then
`--repeats` syncs, each measured as the peak resident set during the sync minus the resident set before it, in
the trainer's process and (`--mode async`) in the generator process. The peak is the kernel's: VmHWM of
/proc/PID/status, reset before each sync by writing 5 to /proc/PID/clear_refs (Linux), so no sampling is missed.
An async sync counts as done when a one-token request sent after the weights has been answered (the generator
handles its messages in order). The sync is whatever the code at hand does (`backend.named_weights` streamed,
or the older `full_state_dict` through torch.save), so the same file measures a checkout before the change.
Writes bench/results/sync-<time>.json.

    rlep bench sync --model ~/.cache/rlep/models/smollm2-b179c9523d0e --mode async
    python -m rlep.tasks.bench.sync --model ~/.cache/rlep/models/smollm2-b179c9523d0e --mode async
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rlep.tasks.bench.flags import add_flags, parse

MIB = 1 << 20


def _status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def _reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # the peak resident set (VmHWM) starts again from now


def measure(model: str, mode: str, engine_dtype: str, bucket_mb: int, repeats: int) -> dict:
    import torch

    from rlep.tasks.engines import EngineConfig, SamplingConfig, make_engine
    from rlep.tasks.training.backend import LocalBackend
    from rlep.tasks.training.config import OptimizerConfig
    from rlep.tasks.training.policy import PolicySpec

    settings = {"backend": "vllm", "dtype": engine_dtype, "max_model_len": 256, "gpu_memory_utilization": 0.3}
    if "sync_bucket_mb" in EngineConfig.model_fields:
        settings["sync_bucket_mb"] = bucket_mb
    config = EngineConfig(**settings)
    backend = LocalBackend(PolicySpec(model, OptimizerConfig()))
    if mode == "sync":
        engine = make_engine(model, config)
    else:
        from rlep.tasks.training.async_gen import GeneratorProcess

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
            if mode == "sync":
                engine.load_weights(weights)
            else:
                engine.push_weights(weights, version)
                engine.generate(["1+1="], greedy)  # answered once the weights are in
            seconds = time.perf_counter() - start
            extra = {side: (_status(pid, "VmHWM") - before[side]) / MIB for side, pid in pids.items()}
            rows.append({"seconds": round(seconds, 3), **{f"{s}_extra_mib": round(v, 1) for s, v in extra.items()}})
    finally:
        engine.close()
    params = backend.model.state_dict()
    return {
        "settings": {"model": model, "mode": mode, "engine_dtype": engine_dtype, "bucket_mb": bucket_mb},
        "sync": "streamed (named_weights)" if streamed else "whole state dict (full_state_dict)",
        "model_mib_float32": round(sum(t.numel() * t.element_size() for t in params.values()) / MIB, 1),
        "syncs": rows,
        "peak_extra_mib": {key: max(r[key] for r in rows) for key in rows[0] if key.endswith("_extra_mib")},
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
    results: Path = Field(Path("bench/results"), description="Directory for the JSON result.")


def run(config: SyncBenchConfig) -> dict:
    """Measure, write bench/results/sync-<time>.json, print the result; returns it."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    result = measure(config.model, config.mode, config.engine_dtype, config.bucket_mb, config.repeats)
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
