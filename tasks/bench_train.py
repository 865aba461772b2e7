"""`rlep bench train`: does RL learn, and what does replay cost? The pipeline's stages without Prefect.

Collects a pool, trains every arm of a `PipelineConfig` (the replay strategy and the `none` baseline,
same seed and budget), and reports per arm the held-out accuracy before and after, the mean step time
split (generate / verify / replay / advantage / train / sync), and the replay overhead (mean step time of
the replay arm over the baseline's). Writes bench/results/train-<time>.json (and each run's files under
the config's `out`).
"""

from __future__ import annotations

from pathlib import Path

from tasks.bench_report import write_bench_report
from tasks.collect import run_collection
from tasks.engines.cache import release_engines
from tasks.pipeline import PipelineConfig
from tasks.report import arm_summary, replay_overhead
from tasks.training.trainer import train


def run_train_bench(config: PipelineConfig, out_dir: Path = Path("bench/results"), progress: bool = True) -> dict:
    try:
        collected = run_collection(config.collect, progress=progress)
    finally:
        release_engines()
    arms = {}
    for name, train_config in config.arms().items():
        result = train(train_config, progress=progress)
        arms[name] = arm_summary(result.out)
        print(f"{name}: held-out avg@{arms[name]['k']} {arms[name]['accuracy_start']:.3f} -> {arms[name]['accuracy_final']:.3f}, "
              f"{arms[name]['step_seconds']:.2f} s/step")  # fmt: skip
    summary = {name: {"accuracy_start": a["accuracy_start"], "accuracy_final": a["accuracy_final"], "step_seconds": a["step_seconds"],
                      "sync_share": a["phase_seconds"].get("sync", 0.0) / a["step_seconds"]} for name, a in arms.items()}  # fmt: skip
    replay_arms = [n for n in arms if n != "baseline"]
    if "baseline" in arms and replay_arms:
        summary["replay_overhead"] = replay_overhead(arms[replay_arms[0]], arms["baseline"])
    path = write_bench_report(
        "train", out_dir, config=config.model_dump(mode="json"),
        collect={"pool": collected["pool"], "timings": collected["timings"]}, arms=arms, summary=summary,
    )  # fmt: skip
    return {"summary": summary, "path": str(path)}
