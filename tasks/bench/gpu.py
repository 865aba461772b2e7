"""`rlep bench gpu` / `python -m rlep.tasks.bench.gpu`: the GPU acceptance check, in under 10 minutes on one GPU.

Three parts, in one process tree, each timed and recorded in one JSON report (written again after every part,
so a run cut short still leaves what it measured):

- `distributed` (part b, tasks/bench/gpu_fsdp.py): one torchrun rank on NCCL with FSDP2 through the real
  backend: updates, the weight-sync source, a checkpoint saved and resumed from; asserts losses finite, weights
  moved, streamed = gathered weights, exact load and resume.
- `train` (part c, tasks/bench/gpu_train.py): the training loop with the `transformers` engine on the GPU on a
  random-init tiny model: 2 steps, a checkpoint, a resume to step 3.
- `update` (part a): `rlep bench update` (tasks/bench/update.py) on the Qwen2.5-0.5B and -1.5B shapes with random
  weights in bf16: update tokens/s, MFU against the card's dense bf16 peak (`shapes.PEAK_TFLOPS`), peak memory.

The correctness parts run first: a slow card or an out-of-memory update must not cost them their turn. Each
part starts only while the time budget (`--budget-seconds`) lasts; one that does not start is `skipped`, and
the check has not passed then. `--device cpu` runs the same code on the CPU at a small size (gloo instead of
NCCL, the `tiny` update shape, fp32 or bf16 as precision `auto` decides), which `make test` runs.

Run: `tasks/bench/gpu_run.sh` on a lent GPU machine (installs the carried wheels, docs/gpu.md "The GPU acceptance
check"), `rlep bench gpu --device cpu` here. Exit status 0 when every part passed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rlep.tasks.bench.flags import add_flags, parse

PARTS = ("distributed", "train", "update")
# The update shapes per device: 64 sequences of 256 + 768 tokens on a GPU (65,536 tokens a step; the 1.5B's
# activations in micro-batches of 4 keep it near 50 GB, inside an H100's 80); a few short ones on the CPU.
UPDATE_RUNS: dict[str, list[dict[str, Any]]] = {
    "cuda": [
        dict(model="qwen2.5-0.5b", prompts=8, group_size=8, prompt_tokens=256, response_tokens=768, micro_batch_size=8),
        dict(model="qwen2.5-1.5b", prompts=8, group_size=8, prompt_tokens=256, response_tokens=768, micro_batch_size=4),
    ],
    "cpu": [dict(model="tiny", prompts=2, group_size=4, prompt_tokens=16, response_tokens=32, micro_batch_size=4)],
}


class GpuCheckConfig(BaseModel):
    """Settings of one acceptance check."""

    model_config = ConfigDict(extra="forbid")

    device: Literal["cuda", "cpu"] = Field(
        "cuda", description="cuda: the GPU check; cpu: the same code at a small size (gloo, `tiny` update shape)."
    )
    parts: list[Literal["distributed", "train", "update"]] = Field(
        list(PARTS), min_length=1, description="Which parts to run, in this order."
    )
    budget_seconds: float = Field(
        480.0, gt=0, le=86_400, description="A part starts only before this many seconds have passed."
    )
    peak_tflops: float | None = Field(
        None, gt=0, description="Dense bf16 peak of the GPU for MFU, in TFLOP/s; default: shapes.PEAK_TFLOPS by name."
    )
    out: Path | None = Field(None, description="JSON report; default bench/results/gpu-DEVICE-UTCTIME.json.")
    work: Path | None = Field(None, description="Folder for models and checkpoints; default a temporary one, removed.")


def peak_bf16_tflops(name: str) -> float | None:
    """The dense bf16 peak of the GPU named `name` (torch.cuda.get_device_name()), or None when not in the table
    (tasks/bench/shapes.py's PEAK_TFLOPS, the one table)."""
    from rlep.tasks.bench.shapes import peak_tflops

    return peak_tflops(name, "bf16")


def machine(device: str) -> dict[str, Any]:
    import torch
    import transformers

    facts = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }
    if device == "cuda" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        facts.update(
            gpu=torch.cuda.get_device_name(0),
            gpu_memory_bytes=props.total_memory,
            gpu_multiprocessors=props.multi_processor_count,
            cuda=torch.version.cuda,
            nccl=".".join(map(str, torch.cuda.nccl.version())),
        )
    return facts


def update_part(config: GpuCheckConfig, work: Path, deadline: float) -> dict[str, Any]:
    """Part (a): the update benchmark per shape of UPDATE_RUNS; a shape that does not start in time is skipped."""
    import torch

    from rlep.tasks.bench.update import UpdateBenchConfig, bench_update
    from rlep.tasks.training.precision import resolve_precision

    cuda = config.device == "cuda"
    precision = "bf16" if cuda else resolve_precision("auto", "cpu").precision
    peak = config.peak_tflops or (peak_bf16_tflops(torch.cuda.get_device_name(0)) if cuda else None)
    if cuda and peak is None:
        raise ValueError(f"{torch.cuda.get_device_name(0)}: no bf16 peak known for MFU; pass --peak-tflops")
    runs = []
    for shape in UPDATE_RUNS[config.device]:
        if time.monotonic() > deadline:
            runs.append({"model": shape["model"], "status": "skipped", "error": "time budget spent"})
            continue
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        bench = UpdateBenchConfig(
            **shape,
            device=config.device,
            precision=precision,
            warmup=1,
            steps=3 if cuda else 2,
            peak_tflops=peak if precision == "bf16" else None,
            out=work / f"update-{shape['model']}.json",
        )
        report = bench_update(bench)
        rank = report["ranks"][0]
        runs.append(
            {
                "model": shape["model"],
                "status": "passed" if report["tokens_per_second"] > 0 and (report["mfu"] or not cuda) else "failed",
                "precision": precision,
                "parameters": report["parameters"],
                "tokens_per_step": report["tokens_per_step"],
                "step_seconds_median": report["step_seconds_median"],
                "tokens_per_second": report["tokens_per_second"],
                "mfu": report["mfu"],
                "peak_tflops": peak if precision == "bf16" else None,
                "peak_memory_bytes": rank.get("peak_cuda_bytes", rank["peak_rss_bytes"]),
                "peak_memory_kind": "cuda_max_allocated" if "peak_cuda_bytes" in rank else "rss",
                "state_bytes": rank["param_bytes"] + rank["optimizer_bytes"] + rank["grad_bytes"],
                "settings": shape,
            }
        )
    if cuda:
        torch.cuda.empty_cache()
    failed = [r["model"] for r in runs if r["status"] != "passed"]
    part: dict[str, Any] = {"status": "failed" if failed else "passed", "runs": runs}
    if failed:
        part["error"] = f"not passed: {', '.join(failed)}"
    return part


def _run_part(name: str, config: GpuCheckConfig, work: Path, deadline: float) -> dict[str, Any]:
    if name == "distributed":
        from rlep.tasks.bench.gpu_fsdp import run_in_torchrun

        return run_in_torchrun(work / "distributed", config.device)
    if name == "train":
        from rlep.tasks.bench.gpu_train import run_training

        return {"status": "passed", **run_training(work / "train", config.device)}
    return update_part(config, work / "update", deadline)


def run_check(config: GpuCheckConfig) -> dict[str, Any]:
    """Run the parts in order within the budget, writing the report after each; returns the report."""
    began = time.monotonic()
    deadline = began + config.budget_seconds
    stamp = datetime.now(timezone.utc)
    out = config.out or Path("bench/results") / f"gpu-{config.device}-{stamp:%Y%m%d-%H%M%S}.json"
    work = config.work or Path(tempfile.mkdtemp(prefix="rlep-gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "bench": "gpu",
        "created_at": stamp.isoformat(),
        "passed": False,
        "config": config.model_dump(mode="json"),
        "report": str(out),
        "machine": machine(config.device),
        "parts": {},
    }
    try:
        for name in config.parts:
            if time.monotonic() > deadline:
                report["parts"][name] = {"status": "skipped", "error": "time budget spent", "seconds": 0.0}
                continue
            print(f"gpu check: {name} ...", flush=True)
            start = time.monotonic()
            try:
                part = _run_part(name, config, work, deadline)
            except Exception as err:  # recorded, and the next part still runs
                traceback.print_exc()
                part = {"status": "failed", "error": f"{type(err).__name__}: {err}"[:4000]}
            part["seconds"] = time.monotonic() - start
            report["parts"][name] = part
            print(f"gpu check: {name} {part['status']} in {part['seconds']:.1f} s", flush=True)
            _write(out, report, began)
        report["passed"] = all(report["parts"][name]["status"] == "passed" for name in config.parts)
        _write(out, report, began)
    finally:
        if config.work is None:
            shutil.rmtree(work, ignore_errors=True)
    return report


def _write(out: Path, report: dict[str, Any], began: float) -> None:
    from rlep.data.fs import write_text_atomic

    report["seconds"] = time.monotonic() - began
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, json.dumps(report, indent=2, default=str) + "\n")


def summary(report: dict[str, Any]) -> str:
    lines = [f"gpu check on {report['machine'].get('gpu', report['config']['device'])}: "]
    lines[0] += f"{'PASSED' if report['passed'] else 'NOT PASSED'} in {report['seconds']:.0f} s"
    for name, part in report["parts"].items():
        line = f"  {name}: {part['status']} ({part.get('seconds', 0):.1f} s)"
        if name == "distributed" and part["status"] == "passed":
            line += f", {part['backend']} {part['strategy']}, losses {[round(v, 4) for v in part['losses']]}"
        if name == "train" and part["status"] == "passed":
            line += f", steps {part['steps']}, resumed at step {part['precision'][-1]['step']}"
        lines.append(line + (f": {part['error'][:300]}" if part.get("error") else ""))
        for run in part.get("runs", []):
            if run["status"] == "passed":
                mfu = f"MFU {100 * run['mfu']:.1f}%" if run["mfu"] is not None else "MFU n/a"
                lines.append(
                    f"    {run['model']} {run['precision']}: {run['tokens_per_second']:.0f} tokens/s, {mfu}, "
                    f"peak {run['peak_memory_bytes'] / 2**30:.2f} GiB ({run['peak_memory_kind']})"
                )
    return "\n".join(lines)


def check(config: GpuCheckConfig) -> int:
    """Run the check from a command line: the CPU variant hides GPUs and uses one thread; print, exit status."""
    if config.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # gloo and the CPU everywhere, also on a machine with a GPU
        os.environ.setdefault("OMP_NUM_THREADS", "1")  # spinning OpenMP threads on shared cores (FIELD_NOTES)
        import torch

        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    else:
        import torch

        if not torch.cuda.is_available():
            print("rlep bench gpu: torch sees no GPU here; `--device cpu` runs the check on the CPU", file=sys.stderr)
            return 2
    report = run_check(config)
    print(summary(report))
    print(f"report: {report['report']}")
    return 0 if report["passed"] else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlep.tasks.bench.gpu", description=__doc__.split("\n\n")[0])
    add_flags(parser, GpuCheckConfig)
    return check(parse(GpuCheckConfig, parser, argv))


if __name__ == "__main__":
    sys.exit(main())
