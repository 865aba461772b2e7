"""`rlep bench train`: does RL learn, and what does replay cost? The pipeline without Prefect.

Runs a `PipelineConfig` through `run_pipeline` with plain stages (for an rlep arm: explore, collect from
its checkpoint, train from the start; the `none` baseline, same seed and budget) and reports per arm the
held-out accuracy before and after, the mean step time split (generate / verify / replay / advantage /
train / sync), and the replay overhead (mean step time of the replay arm over the baseline's). Writes
bench/results/train-<time>.json (and each run's files under the config's `out`).
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from rlep.data.run_layout import CollectRunLayout
from rlep.tasks.bench.report import write_bench_report
from rlep.tasks.pipeline import run_pipeline
from rlep.tasks.report import arm_summary, replay_overhead
from rlep.tasks.settings.pipeline import PipelineConfig


class TrainBenchOutput(BaseModel):
    """Where `rlep bench train` writes its result (`run_train_bench`'s `out_dir`); what it runs is a PipelineConfig."""

    model_config = ConfigDict(extra="forbid")

    results: Path = Field(Path("bench/results"), description="Directory for the JSON result.")


def run_train_bench(config: PipelineConfig, out_dir: Path = Path("bench/results"), progress: bool = True) -> dict:
    # A benchmark measures every run (reuse off), each in a fresh process (no stages given), so the arms' step
    # times carry nothing the runs before them left behind.
    result = run_pipeline(config, reuse=False, progress=progress)
    arms = {name: arm_summary(run_dir) for name, run_dir in result.arms.items()}
    for name, a in arms.items():
        print(
            f"{name}: held-out avg@{a['k']} {a['accuracy_start']:.3f} -> {a['accuracy_final']:.3f}, "
            f"{a['step_seconds']:.2f} s/step"
        )
    summary = {
        name: {
            "accuracy_start": a["accuracy_start"],
            "accuracy_final": a["accuracy_final"],
            "step_seconds": a["step_seconds"],
            "sync_share": a["phase_seconds"].get("sync", 0.0) / a["step_seconds"],
        }
        for name, a in arms.items()
    }
    replay_arms = [n for n in arms if n != "baseline"]
    if "baseline" in arms and replay_arms:
        summary["replay_overhead"] = replay_overhead(arms[replay_arms[0]], arms["baseline"])
    manifest = json.loads(CollectRunLayout(result.collect_dir).manifest.read_text()) if result.collect_dir else {}
    path = write_bench_report(
        "train",
        out_dir,
        config=config.model_dump(mode="json"),
        collect={
            "counts": manifest.get("counts"),
            "timings": manifest.get("timings"),
            "pool_source": result.pool_source,
        },
        arms=arms,
        summary=summary,
    )
    return {"summary": summary, "path": str(path)}
