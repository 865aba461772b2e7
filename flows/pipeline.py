"""Prefect flow `pipeline`: the whole mission as one DAG of subflows (each its own run in the Prefect UI).

    evaluate the start
      -> explore (rlep with `pool_from: explore`: GRPO from the start; the baseline arm when it is the same run)
      -> collect (Phase I: the verified pool, sampled from the exploration checkpoint)
      -> train each arm (Phase II, rlep restarted from the start; the baseline) and evaluate its last checkpoint
      -> report (report.md + held-out accuracy PNG comparing the arms)

The runs come from the study's planner and execute through its executor (`tasks.pipeline.run_pipeline`); this
flow only hands them the Prefect subflows.
`rlep pipeline --config flows/configs/demo.yaml` runs it (that is `make demo`); `pipeline_flow(PipelineConfig())`
in Python; or the `pipeline` deployment of `rlep serve` from the UI.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact

from rlep.flows.collect import collect_flow
from rlep.flows.evaluate import evaluate_flow
from rlep.flows.train import train_flow
from rlep.tasks.execute import Stages
from rlep.tasks.pipeline import PipelineConfig, run_pipeline
from rlep.tasks.report import write_report


@task(name="write-report")
def report_task(out: Path, arms: dict, evaluations: dict, collect_dir: Path | None, pool_source: dict | None) -> str:
    path = write_report(out, arms, evaluations, collect_dir, pool_source)
    create_markdown_artifact(key="pipeline-report", markdown=path.read_text())
    return str(path)


@flow(name="pipeline", log_prints=True)
def pipeline_flow(config: PipelineConfig = PipelineConfig()) -> str:
    """Run evaluate -> [explore] -> collect -> train (replay, baseline) -> evaluate -> report; returns the report's path."""
    stages = Stages(collect=collect_flow, train=lambda c, resume: train_flow(c, resume=resume), evaluate=evaluate_flow)
    report = run_pipeline(config, stages, report_task).report
    print(f"report: {report}")
    return str(report)
