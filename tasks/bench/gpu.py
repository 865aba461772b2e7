"""`rlep bench gpu` / `python -m rlep.tasks.bench.gpu`: the GPU acceptance check, in under 10 minutes on one GPU.

Five parts, in one process tree, each timed and recorded in one JSON report (written again after every part,
so a run cut short still leaves what it measured):

- `distributed` (part b, tasks/bench/gpu_fsdp.py): one torchrun rank on NCCL with FSDP2 through the real
  backend: updates, the weight-sync source, a checkpoint saved and resumed from; asserts losses finite, weights
  moved, streamed = gathered weights, exact load and resume.
- `train` (part c, tasks/bench/gpu_train.py): the training loop with the `transformers` engine on the GPU on a
  random-init tiny model: 2 steps, a checkpoint, a resume to step 3.
- `async` (part e, tasks/bench/gpu_train.py): the `train` part in `mode: async`, its engine in a generator process
  sharing the device: the weights cross after each update through a `cuda-ipc` bucket on a GPU (`shared-memory`
  on the CPU), which the part asserts, with rollouts within the staleness bound.
- `update` (part a): `rlep bench update` (tasks/bench/update.py) per line of UPDATE_RUNS with random weights in
  bf16: the Qwen2.5-0.5B and -1.5B shapes at 1,024 tokens a sequence, and the 1.5B shape with answers of
  varied length up to ~4k tokens, activation checkpointing and the KL reference. Update tokens/s, MFU against
  the card's dense bf16 peak (`shapes.PEAK_TFLOPS`) counted by 6N and with attention (torchtitan's
  convention), peak memory. Each line carries its thresholds (an MFU floor on the count with attention, a
  peak-memory ceiling, and what they rest on) into the report; a line that misses one is `failed`.
- `vllm` (part d): the `train` part's loop with the vLLM engine (generation, vLLM's in-place weight reload,
  resume). Where vLLM does not import (the lent GPU machines' image has none) it is `not verified`: never
  `passed`. It runs last, so an engine's memory and threads cannot distort the update's measurements.

A part's status is `passed`, `failed`, `skipped` (it could not start within `--budget-seconds`) or `not
verified`. The verdict (`check_verdict`): `failed` if a part failed; else `incomplete` if one was skipped;
else `not verified` if one could not be verified; else `passed`. Exit status (`EXIT_STATUS`): 0 passed, 1
failed or incomplete, 3 not verified (a check with a part not verified is not a pass), 2 no GPU seen or bad
flags. `--device cpu` runs the same code on the CPU at a small size (gloo instead of NCCL, `tiny` update
lines of both kinds, fp32 or bf16 as precision `auto` decides), which `make test` runs.

Run: `tasks/bench/gpu_run.sh` on a lent GPU machine (installs the carried wheels, docs/gpu.md "The GPU acceptance
check"), `rlep bench gpu --device cpu` here; `--parts distributed train async update` leaves the vLLM part out.
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
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rlep.tasks.bench.flags import add_flags, parse

PARTS = ("distributed", "train", "async", "update", "vllm")
GIB = 2**30


@dataclass(frozen=True)
class UpdateLine:
    """One line of the update part: `rlep bench update`'s settings and the thresholds its measurements must meet.

    `mfu_floor` applies to `mfu_with_attention` (6N plus attention, torchtitan's convention: tasks/bench/update.py
    `attention_flops`), a fraction of the card's dense bf16 peak; None: no floor (`basis` says why). The
    ceiling applies to the peak memory during the steps: CUDA's peak allocation on a GPU, the process's peak
    RSS (VmHWM since the steps began) on the CPU. `basis`: what the numbers rest on."""

    name: str
    settings: dict[str, Any]
    mfu_floor: float | None
    peak_memory_ceiling_gib: float
    basis: str

    def thresholds(self) -> dict[str, Any]:
        return {
            "mfu_floor": self.mfu_floor,
            "mfu_floor_counts": "mfu_with_attention",
            "peak_memory_ceiling_bytes": int(self.peak_memory_ceiling_gib * GIB),
            "basis": self.basis,
        }


# The measured lines' basis: the H100 SXM run of 2026-11-27 (docs/gpu-runs/h100-2026-11-27/gpu-check.json, the
# same settings), and for the long-sequence line, added since, the H200 run of 2026-11-29 (the same compute; the
# other two lines there within 5% of the H100's MFU): floors ~0.78x the MFU measured, so a slowdown of a quarter
# fails while the few percent the step times moved between runs do not; ceilings ~15% over the peak allocation.
H100_RUN = "docs/gpu-runs/h100-2026-11-27/gpu-check.json (H100 SXM)"
H200_RUN = "docs/gpu-runs/h200-2026-11-29/gpu-check.json (H200)"
NO_CPU_FLOOR = "no MFU floor on cpu: no peak FLOP/s is known for a shared CPU, so no MFU is computed"
# Per device: on a GPU 64 sequences of 256 + 768 tokens (65,536 tokens a step; the 1.5B's activations in
# micro-batches of 4 keep it near 50 GB, inside an H100's 80), then the long-sequence line: 32 answers of
# lengths drawn from 1..4,096 (up to 4,052 tokens with the prompt, 81,566 tokens a step) with activation
# checkpointing and the KL reference, as a real 1.5B recipe runs (docs/gpu.md, the memory arithmetic). On the
# CPU the same two kinds of line at the `tiny` shape, so the code of both runs in `make test`.
UPDATE_RUNS: dict[str, list[UpdateLine]] = {
    "cuda": [
        UpdateLine(
            "qwen2.5-0.5b",
            dict(
                model="qwen2.5-0.5b",
                prompts=8,
                group_size=8,
                prompt_tokens=256,
                response_tokens=768,
                micro_batch_size=8,
            ),
            mfu_floor=0.12,
            peak_memory_ceiling_gib=30.0,
            basis=f"{H100_RUN}: MFU 14.2% by 6N, 15.5% with attention; peak 25.8 GiB",
        ),
        UpdateLine(
            "qwen2.5-1.5b",
            dict(
                model="qwen2.5-1.5b",
                prompts=8,
                group_size=8,
                prompt_tokens=256,
                response_tokens=768,
                micro_batch_size=4,
            ),
            mfu_floor=0.18,
            peak_memory_ceiling_gib=52.0,
            basis=f"{H100_RUN}: MFU 21.9% by 6N, 23.1% with attention; peak 45.4 GiB",
        ),
        UpdateLine(
            "qwen2.5-1.5b-long-ac-kl",
            dict(
                model="qwen2.5-1.5b",
                prompts=4,
                group_size=8,
                prompt_tokens=256,
                response_tokens=4096,
                response_lengths="varied",
                activation_checkpointing=True,
                kl=True,
                micro_batch_size=2,
            ),
            mfu_floor=0.10,
            peak_memory_ceiling_gib=54.0,
            basis=f"{H200_RUN}: MFU 10.9% by 6N, 12.7% with attention; peak 46.9 GiB (estimated before it ran: "
            "12-20% and ~40 GiB)",
        ),
    ],
    "cpu": [
        UpdateLine(
            "tiny",
            dict(model="tiny", prompts=2, group_size=4, prompt_tokens=16, response_tokens=32, micro_batch_size=4),
            mfu_floor=None,
            peak_memory_ceiling_gib=3.0,
            basis=f"{NO_CPU_FLOOR}; the ceiling bounds the check process's peak RSS during the steps: 0.5-0.75 GiB "
            "measured here (torch and transformers loaded, the earlier parts' leftovers; the model's own state is "
            "0.3 MiB), so it is loose: it catches a runaway, not a small growth",
        ),
        UpdateLine(
            "tiny-long-ac-kl",
            dict(
                model="tiny",
                prompts=2,
                group_size=4,
                prompt_tokens=16,
                response_tokens=64,
                response_lengths="varied",
                activation_checkpointing=True,
                kl=True,
                micro_batch_size=2,
            ),
            mfu_floor=None,
            peak_memory_ceiling_gib=3.0,
            basis=f"{NO_CPU_FLOOR}; the cuda long-sequence line's kind at the tiny shape; the ceiling as for `tiny`",
        ),
    ],
}
EXIT_STATUS = {"passed": 0, "failed": 1, "incomplete": 1, "not verified": 3}
# What no part of this check exercises, on any machine: written into every report beside the verdict.
NOT_COVERED = [
    "more than one rank (NCCL refuses two ranks on one GPU)",
    "generation speed and vLLM's sleep mode",
    "the recipes of docs/gpu.md as whole runs",
]


class GpuCheckConfig(BaseModel):
    """Settings of one acceptance check."""

    model_config = ConfigDict(extra="forbid")

    device: Literal["cuda", "cpu"] = Field(
        "cuda", description="cuda: the GPU check; cpu: the same code at a small size (gloo, `tiny` update shape)."
    )
    parts: list[Literal["distributed", "train", "async", "update", "vllm"]] = Field(
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


def update_verdict(measured: dict[str, Any], thresholds: dict[str, Any]) -> tuple[str, list[str]]:
    """`passed` or `failed` for one update line's measurements against its thresholds (UpdateLine.thresholds),
    with the misses: no tokens moved, MFU with attention below the floor (or none measured where there is a
    floor), peak memory over the ceiling."""
    misses = []
    if not measured["tokens_per_second"] > 0:
        misses.append(f"tokens/s {measured['tokens_per_second']} is not positive")
    floor = thresholds["mfu_floor"]
    mfu = measured.get("mfu_with_attention")
    if floor is not None and mfu is None:
        misses.append(f"no MFU measured (no peak FLOP/s) against the floor {floor:.1%}")
    elif floor is not None and mfu < floor:
        misses.append(f"MFU with attention {mfu:.1%} below its floor {floor:.1%}")
    ceiling = thresholds["peak_memory_ceiling_bytes"]
    if measured["peak_memory_bytes"] > ceiling:
        misses.append(
            f"peak memory {measured['peak_memory_bytes'] / GIB:.2f} GiB over its ceiling {ceiling / GIB:.2f} GiB"
        )
    return ("failed" if misses else "passed"), misses


def check_verdict(statuses: Iterable[str]) -> str:
    """The check's verdict from its parts' statuses (module docstring): a part not verified is not a pass."""
    statuses = set(statuses)
    if "failed" in statuses:
        return "failed"
    if "skipped" in statuses:
        return "incomplete"
    if "not verified" in statuses:
        return "not verified"
    return "passed"


def update_part(config: GpuCheckConfig, work: Path, deadline: float) -> dict[str, Any]:
    """Part (a): the update benchmark per line of UPDATE_RUNS, judged against the line's thresholds; a line that
    does not start in time is skipped, one that raises (out of memory, say) failed, and the next still runs."""
    import torch

    from rlep.tasks.bench.update import UpdateBenchConfig, bench_update
    from rlep.tasks.training.backends.precision import resolve_precision

    cuda = config.device == "cuda"
    precision = "bf16" if cuda else resolve_precision("auto", "cpu").precision
    peak = config.peak_tflops or (peak_bf16_tflops(torch.cuda.get_device_name(0)) if cuda else None)
    if cuda and peak is None:
        raise ValueError(f"{torch.cuda.get_device_name(0)}: no bf16 peak known for MFU; pass --peak-tflops")
    runs = []
    for line in UPDATE_RUNS[config.device]:
        run: dict[str, Any] = {"name": line.name, "model": line.settings["model"], "thresholds": line.thresholds()}
        runs.append(run)
        if time.monotonic() > deadline:
            run.update(status="skipped", error="time budget spent")
            continue
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        bench = UpdateBenchConfig(
            **line.settings,
            device=config.device,
            precision=precision,
            warmup=1,
            steps=3 if cuda else 2,
            peak_tflops=peak if precision == "bf16" else None,
            out=work / f"update-{line.name}.json",
        )
        try:
            report = bench_update(bench)
        except Exception as err:  # recorded; the next line still runs
            traceback.print_exc()
            run.update(status="failed", error=f"{type(err).__name__}: {err}"[:2000], settings=line.settings)
            if cuda:
                torch.cuda.empty_cache()
            continue
        rank = report["ranks"][0]
        measured = {
            "precision": precision,
            "parameters": report["parameters"],
            "tokens_per_step": report["tokens_per_step"],
            "sequence_tokens": report["sequence_tokens"],
            "step_seconds_median": report["step_seconds_median"],
            "tokens_per_second": report["tokens_per_second"],
            "mfu": report["mfu"],
            "mfu_with_attention": report["mfu_with_attention"],
            "attention_flops_per_step": report["attention_flops_per_step"],
            "peak_tflops": peak if precision == "bf16" else None,
            "peak_memory_bytes": rank.get("peak_cuda_bytes", rank["peak_rss_bytes"]),
            "peak_memory_kind": "cuda_max_allocated" if "peak_cuda_bytes" in rank else "rss",
            "state_bytes": rank["param_bytes"] + rank["optimizer_bytes"] + rank["grad_bytes"],
            "reference_bytes": rank.get("reference_bytes", 0),
            "settings": line.settings,
        }
        status, misses = update_verdict(measured, run["thresholds"])
        run.update(status=status, misses=misses, **measured)
    if cuda:
        torch.cuda.empty_cache()
    statuses = {r["status"] for r in runs}
    status = "failed" if "failed" in statuses else "skipped" if "skipped" in statuses else "passed"
    part: dict[str, Any] = {"status": status, "runs": runs}
    if status != "passed":
        part["error"] = "not passed: " + ", ".join(
            f"{r['name']} {r['status']}" for r in runs if r["status"] != "passed"
        )
    return part


def vllm_importable() -> tuple[bool, str]:
    """The probe behind the `vllm` part: whether vLLM imports here, with its version, or why not (not
    installed, or installed but broken: a mismatched torchvision stops it, FIELD_NOTES)."""
    try:
        import vllm
    except Exception as err:
        return False, f"{type(err).__name__}: {err}"[:500]
    return True, str(getattr(vllm, "__version__", "unknown"))


def vllm_part(config: GpuCheckConfig, work: Path) -> dict[str, Any]:
    """Part (d): the loop with the vLLM engine where vLLM imports, else `not verified` (never `passed`)."""
    importable, detail = vllm_importable()
    if not importable:
        return {
            "status": "not verified",
            "vllm": None,
            "error": f"vLLM does not import here ({detail}): vLLM generation and its in-place weight reload "
            f"on {config.device} were not verified by this check",
        }
    from rlep.tasks.bench.gpu_train import run_training

    return {"status": "passed", "vllm": detail, **run_training(work, config.device, engine="vllm")}


def _run_part(name: str, config: GpuCheckConfig, work: Path, deadline: float) -> dict[str, Any]:
    if name == "distributed":
        from rlep.tasks.bench.gpu_fsdp import run_in_torchrun

        return run_in_torchrun(work / "distributed", config.device)
    if name in ("train", "async"):
        from rlep.tasks.bench.gpu_train import run_training

        mode = "async" if name == "async" else "sync"
        return {"status": "passed", **run_training(work / name, config.device, mode=mode)}
    if name == "vllm":
        return vllm_part(config, work / "vllm")
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
        "verdict": "incomplete",
        "exit_status": EXIT_STATUS["incomplete"],
        "not_covered": NOT_COVERED,
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
        report["verdict"] = check_verdict(report["parts"][name]["status"] for name in config.parts)
        report["exit_status"] = EXIT_STATUS[report["verdict"]]
        report["passed"] = report["verdict"] == "passed"
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
    lines[0] += f"{report['verdict'].upper()} in {report['seconds']:.0f} s"
    for name, part in report["parts"].items():
        line = f"  {name}: {part['status']} ({part.get('seconds', 0):.1f} s)"
        if name == "distributed" and part["status"] == "passed":
            line += f", {part['backend']} {part['strategy']}, losses {[round(v, 4) for v in part['losses']]}"
        if name in ("train", "async") and part["status"] == "passed":
            line += f", steps {part['steps']}, resumed at step {part['precision'][-1]['step']}"
        if name == "async" and part["status"] == "passed":
            line += f", weights through {part['weights_transport']}, staleness {part['staleness_max']}"
        lines.append(line + (f": {part['error'][:300]}" if part.get("error") else ""))
        for run in part.get("runs", []):
            lines.append(f"    {run['name']}: {run['status']}" + _run_line(run))
    lines.append(f"  not covered by this check: {'; '.join(report['not_covered'])}")
    return "\n".join(lines)


def _run_line(run: dict[str, Any]) -> str:
    if "tokens_per_second" not in run:
        return f": {run.get('error', '')[:300]}"
    limits = run["thresholds"]
    floor = f"floor {100 * limits['mfu_floor']:.0f}%" if limits["mfu_floor"] is not None else "no floor"
    mfu = (
        f"MFU {100 * run['mfu']:.1f}% by 6N, {100 * run['mfu_with_attention']:.1f}% with attention ({floor})"
        if run["mfu"] is not None
        else f"MFU n/a ({floor})"
    )
    return (
        f", {run['precision']}: {run['tokens_per_second']:.0f} tokens/s, {mfu}, peak "
        f"{run['peak_memory_bytes'] / GIB:.2f} GiB ({run['peak_memory_kind']}; ceiling "
        f"{limits['peak_memory_ceiling_bytes'] / GIB:.0f} GiB)"
        + (f"; {'; '.join(run['misses'])}" if run["misses"] else "")
    )


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
    return report["exit_status"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlep.tasks.bench.gpu", description=__doc__.split("\n\n")[0])
    add_flags(parser, GpuCheckConfig)
    return check(parse(GpuCheckConfig, parser, argv))


if __name__ == "__main__":
    sys.exit(main())
