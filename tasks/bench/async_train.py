"""`rlep bench async`: steps per second of async training against sync, same settings, and where the time goes.

Runs the same training configuration (FIFO replay by default, the FIFO paper's setting) in `mode: sync`
and `mode: async`, alternated over `pairs` (sync, async, sync, async, ...) so a drift in the machine's load
hits both. Per run it reads the median over steady steps (the first `skip_steps` and the last one, which
also evaluates and saves, excluded) of:

- `time_step` (wall seconds between the ends of consecutive steps) and the phase columns of metrics.parquet;
- CPU seconds per step of the run's processes (the trainer, and in async mode the generator process too),
  measured around each step. CPU seconds / (wall seconds x cores) is how busy the cores were.

From them: `speedup` = sync step / async step (per pair, and the median over pairs), and the **overlap
ceiling** = sync step / (async CPU seconds per step / cores): the async step if its work kept every core
busy all the time. Overlap can only fill idle cores, so this estimates the most async can gain on this
machine for this workload. An estimate, not a strict bound: CPU seconds include OpenMP threads spinning
while they wait, which a better schedule could turn into work.
Writes bench/results/async-<time>.json; the runs' own files go under `train.out`.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlep.data.run_layout import TrainRunLayout
from rlep.tasks.bench.report import write_bench_report
from rlep.tasks.progress import progress_bar
from rlep.tasks.runner import module_env
from rlep.tasks.settings.replay import FIFOReplayConfig
from rlep.tasks.settings.source import default_task
from rlep.tasks.settings.train import TrainConfig

PHASES_SYNC = ("time_generate", "time_train")
PHASES_ASYNC = ("time_train", "time_wait_generate", "time_generator_busy", "time_wait_train")


def _bench_train_config() -> TrainConfig:
    return TrainConfig(
        problems=default_task("train", limit=800),
        replay=FIFOReplayConfig(batch_size=320),  # 5 mini-batches of 8 prompts' worth (ratio 0.2)
        steps=12,
        prompts_per_step=32,
        samples_per_prompt=8,
        eval_every=0,
        save_every=0,
        out=Path("runs/bench-async"),
    )


class AsyncBenchConfig(BaseModel):
    """What the async benchmark runs: one training configuration, in both modes."""

    model_config = ConfigDict(extra="forbid")

    train: TrainConfig = Field(
        default_factory=_bench_train_config,
        description="The training run, as `rlep train` takes it (`mode` is set by the benchmark); runs go to "
        "OUT/pair-K-MODE.",
    )
    pairs: int = Field(2, ge=1, le=100, description="Sync/async pairs, alternated.")
    skip_steps: int = Field(
        2, ge=0, le=1000, description="First steps left out of the medians (engine and allocator warm-up)."
    )
    results: Path = Field(Path("bench/results"), description="Directory for the JSON result.")

    @model_validator(mode="after")
    def _steady_steps(self) -> AsyncBenchConfig:
        if self.train.steps < self.skip_steps + 2:
            raise ValueError(
                f"train.steps ({self.train.steps}) must be at least skip_steps + 2 ({self.skip_steps + 2}): "
                "the medians leave out the first skip_steps steps and the last one"
            )
        return self


class _CpuClock:
    """CPU seconds (user + system, all threads) of this process and, in async mode, of the generator process."""

    def __init__(self, generator_pid: int | None) -> None:
        self.trainer = psutil.Process()
        self.generator = psutil.Process(generator_pid) if generator_pid else None

    def __call__(self) -> tuple[float, float]:
        return sum(self.trainer.cpu_times()[:2]), sum(self.generator.cpu_times()[:2]) if self.generator else 0.0


def measure_run(config: TrainConfig) -> dict[str, Any]:
    """Train `config` in this process; its metrics rows and the CPU seconds of each step."""
    import pyarrow.parquet as pq

    from rlep.tasks.training.loop.steps import Trainer  # torch and the engines: not needed to build the CLI

    load_before = os.getloadavg()[0]
    trainer = Trainer(config, progress=False)
    clock = _CpuClock(getattr(trainer.engine, "pid", None))
    cpu: dict[int, tuple[float, float]] = {}  # step -> CPU seconds of (trainer, generator) since the last step
    last = [clock()]

    def on_step(row: dict, _eval_rows: list[dict] | None) -> None:
        now = clock()
        if row.get("step"):
            cpu[row["step"]], last[0] = (now[0] - last[0][0], now[1] - last[0][1]), now

    try:
        trainer.run(on_step)
    finally:
        trainer.close()
    rows = pq.read_table(TrainRunLayout(config.out).metrics).to_pylist()
    return {"rows": rows, "cpu": cpu, "load_before": load_before, "load_after": os.getloadavg()[0]}


def _run(config: TrainConfig) -> dict[str, Any]:
    """`measure_run` in a fresh interpreter: a run before it (its engine, its threads) must not share its process."""
    config.out.mkdir(parents=True, exist_ok=True)
    settings, result = config.out / "bench-config.json", config.out / "bench-result.json"
    settings.write_text(config.model_dump_json())
    done = subprocess.run(
        [sys.executable, "-m", "rlep.tasks.bench.async_train", str(settings), str(result)], env=module_env()
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"bench run {config.out} ({config.mode}) failed with exit code {done.returncode}; its output is in the "
            f"run log"
        )
    run = json.loads(result.read_text())
    run["cpu"] = {int(step): tuple(v) for step, v in run["cpu"].items()}
    return run


def _median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def summarize_run(run: dict[str, Any], mode: str, skip_steps: int, cores: int) -> dict[str, Any]:
    """Medians over steady steps: step wall time, the mode's phases, CPU seconds and how busy the cores were."""
    steps = [r["step"] for r in run["rows"]]
    steady = [r for r in run["rows"] if skip_steps < r["step"] < max(steps)]
    step_seconds = _median([r["time_step"] for r in steady])
    measured = [run["cpu"][r["step"]] for r in steady if r["step"] in run["cpu"]]
    cpu_seconds = _median([trainer + generator for trainer, generator in measured])
    phases = PHASES_SYNC if mode == "sync" else PHASES_ASYNC
    return {
        "mode": mode,
        "steps_measured": [r["step"] for r in steady],
        "step_seconds": step_seconds,
        "steps_per_second": 1.0 / step_seconds,
        **{name.removeprefix("time_") + "_seconds": _median([r[name] for r in steady]) for name in phases},
        "cpu_seconds_per_step": cpu_seconds,
        "trainer_cpu_seconds": _median([trainer for trainer, _ in measured]),
        "generator_cpu_seconds": _median([generator for _, generator in measured]),
        "cores_busy": cpu_seconds / (step_seconds * cores),
        "staleness_mean": _median([r["staleness_mean"] for r in steady]),
        "dropped_stale": sum(r["dropped_stale"] for r in run["rows"]),
        "load_average": [run["load_before"], run["load_after"]],
    }


def summarize(pairs: list[dict[str, dict]], cores: int) -> dict[str, Any]:
    """Speed-up per pair and its median; the overlap ceiling from async's CPU seconds per step."""
    speedups = [p["sync"]["step_seconds"] / p["async"]["step_seconds"] for p in pairs]
    ceilings = [p["sync"]["step_seconds"] / (p["async"]["cpu_seconds_per_step"] / cores) for p in pairs]
    return {
        "speedup_per_pair": [round(s, 3) for s in speedups],
        "speedup": round(_median(speedups), 3),
        "overlap_ceiling": round(_median(ceilings), 3),
        "sync_step_seconds": round(_median([p["sync"]["step_seconds"] for p in pairs]), 3),
        "async_step_seconds": round(_median([p["async"]["step_seconds"] for p in pairs]), 3),
        "cores": cores,
    }


def run_async_bench(config: AsyncBenchConfig, progress: bool = True) -> dict[str, Any]:
    """Run the pairs; returns {"summary": ..., "pairs": ..., "path": json path}."""
    cores = len(os.sched_getaffinity(0))
    base = config.train.out
    pairs = []
    with progress_bar(progress, "bench async runs", 2 * config.pairs) as advance:
        for k in range(1, config.pairs + 1):
            pair = {}
            for mode in ("sync", "async"):
                run_config = config.train.model_copy(update={"mode": mode, "out": base / f"pair-{k}-{mode}"})
                start = time.perf_counter()
                pair[mode] = summarize_run(_run(run_config), mode, config.skip_steps, cores)
                pair[mode]["run_seconds"] = time.perf_counter() - start
                line = (
                    f"pair {k} {mode}: {pair[mode]['step_seconds']:.3f} s/step, "
                    f"{pair[mode]['cpu_seconds_per_step']:.2f} "
                    f"CPU s/step ({pair[mode]['cores_busy']:.0%} of {cores} cores busy)"
                )
                print(line)
                advance(line)
            pairs.append(pair)
    summary = summarize(pairs, cores)
    path = write_bench_report(
        "async", config.results, config=config.model_dump(mode="json"), pairs=pairs, summary=summary
    )
    return {"summary": summary, "pairs": pairs, "path": str(path)}


def _main() -> None:
    """One run, by `_run`: python -m rlep.tasks.bench.async_train CONFIG.json RESULT.json."""
    config = TrainConfig.model_validate_json(Path(sys.argv[1]).read_text())
    Path(sys.argv[2]).write_text(json.dumps(measure_run(config)))


if __name__ == "__main__":
    from rlep.tasks.quick_exit import run_then_exit

    sys.exit(run_then_exit(_main))
