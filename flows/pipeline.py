"""Prefect flow `pipeline`: the whole mission as one DAG of subflows (each its own run in the Prefect UI).

    evaluate the start
      -> explore (rlep with `pool_from: explore`: GRPO from the start; the baseline arm when it is the same run)
      -> collect (Phase I: the verified pool, sampled from the exploration checkpoint)
      -> train each arm (Phase II, rlep restarted from the start; the baseline) and evaluate its last checkpoint
      -> report (report.md + held-out accuracy PNG comparing the arms)

The runs come from the study's planner and execute through its executor (`tasks.pipeline.run_pipeline`), which
decides each run's actions; this flow only hands it the carrier of those actions, Prefect subflows
(`flows/subflows.py`). Each action is a process of its own, as without Prefect, so the step times the report
compares carry nothing an earlier run left behind: a `carry-out` task of this run on a process pool made for it,
so its subflow is still a child of this run in the UI, with its logs and artifacts.
`rlep pipeline --config flows/configs/demo.yaml` runs it (that is `make demo`); `pipeline_flow(PipelineConfig())`
in Python; or the `pipeline` deployment of `rlep serve` from the UI.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact

from rlep.flows.subflows import Subflows
from rlep.tasks.pipeline import plan, run_pipeline
from rlep.tasks.plan import check_plan_inputs
from rlep.tasks.report import write_report
from rlep.tasks.settings.pipeline import PipelineConfig


@task(name="write-report")
def report_task(out: Path, arms: dict, evaluations: dict, collect_dir: Path | None, pool_source: dict | None) -> str:
    path = write_report(out, arms, evaluations, collect_dir, pool_source)
    create_markdown_artifact(key="pipeline-report", markdown=path.read_text())
    return str(path)


@flow(name="pipeline", log_prints=True)
def pipeline_flow(config: PipelineConfig = PipelineConfig()) -> str:
    """Run evaluate -> [explore] -> collect -> train (replay, baseline) -> evaluate -> report; returns the report's
    path."""
    check_plan_inputs(plan(config))  # a UI-triggered run's sources, before its first run (the CLI checks earlier)
    report = run_pipeline(config, Subflows(isolate=True), report_task).report
    print(f"report: {report}")
    return str(report)
