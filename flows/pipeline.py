"""Prefect flow `pipeline`: the whole mission as one DAG of subflows (each its own run in the Prefect UI).

    collect (Phase I: verified pool from the base model or a checkpoint)
      -> train (Phase II, the chosen replay strategy on that pool)
      -> train baseline (optional: replay none, same seed and budget)
      -> evaluate (the starting model and every arm's final checkpoint on the held-out split, K samples)
      -> report (report.md + learning-curve PNG comparing the arms)

`rlep pipeline --config configs/demo.yaml` runs it (that is `make demo`); `pipeline_flow(PipelineConfig())`
in Python; or the `pipeline` deployment of `rlep serve` from the UI.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact

from flows.collect import collect_flow
from flows.evaluate import evaluate_flow
from flows.train import train_flow
from tasks.pipeline import PipelineConfig
from tasks.report import write_report


@task(name="write-report")
def report_task(config: PipelineConfig, arms: dict[str, str], evaluations: dict[str, str], collect_dir: str) -> str:
    path = write_report(config.out, {k: Path(v) for k, v in arms.items()}, {k: Path(v) for k, v in evaluations.items()}, Path(collect_dir))
    create_markdown_artifact(key="pipeline-report", markdown=path.read_text())
    return str(path)


@flow(name="pipeline", log_prints=True)
def pipeline_flow(config: PipelineConfig = PipelineConfig()) -> str:
    """Run collect -> train (replay, baseline) -> evaluate -> report; returns the report's path."""
    collected = collect_flow(config.collect)
    arm_dirs, evaluations = {}, {}
    base_out = config.out / "eval" / "base"  # the starting policy, so the final numbers have a "before"
    evaluate_flow(config.evaluate.model_copy(update={"model": config.train.model, "out": base_out}))
    evaluations["base"] = str(base_out)
    for name, train_config in config.arms().items():
        result = train_flow(train_config)
        arm_dirs[name] = str(result.out)
        eval_out = config.out / "eval" / name
        evaluate_flow(config.evaluate.model_copy(update={"model": str(result.final_checkpoint), "out": eval_out}))
        evaluations[name] = str(eval_out)
    report = report_task(config, arm_dirs, evaluations, collected["run_dir"])
    print(f"report: {report}")
    return report
