"""Prefect flow `pipeline`: the whole mission as one DAG of subflows (each its own run in the Prefect UI).

    evaluate the start
      -> explore (rlep with `pool_from: explore`: GRPO from the start; the baseline arm when it is the same run)
      -> collect (Phase I: the verified pool, sampled from the exploration checkpoint)
      -> train each arm (Phase II, rlep restarted from the start; the baseline) and evaluate its last checkpoint
      -> report (report.md + held-out accuracy PNG comparing the arms)

The runs come from the study's planner and execute through its executor (`tasks.pipeline.run_pipeline`); this
flow only hands them the Prefect subflows. Each run is a process of its own, as without Prefect, so the step
times the report compares carry nothing an earlier run left behind: the new process enters this flow run's
context again (Prefect's `serialize_context` / `hydrated_context`, what its own task runners do), so its
subflow is still a child of this run in the UI, with its logs and artifacts.
`rlep pipeline --config flows/configs/demo.yaml` runs it (that is `make demo`); `pipeline_flow(PipelineConfig())`
in Python; or the `pipeline` deployment of `rlep serve` from the UI.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cloudpickle
from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.context import hydrated_context, serialize_context

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


@dataclass
class Subflows:
    """The stages as subflows of the flow run that made this object, callable from another process (it pickles:
    the context is cloudpickled, since it holds the flow object)."""

    context: bytes  # cloudpickle of prefect.context.serialize_context()
    api_url: str  # the server's, which an ephemeral server (`rlep pipeline` without one) gives only in memory

    @classmethod
    def of_this_flow_run(cls) -> Subflows:
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            api_url = str(client.api_url)
        return cls(context=cloudpickle.dumps(serialize_context()), api_url=api_url)

    def stages(self) -> Stages:
        return Stages(collect=self.collect, train=self.train, evaluate=self.evaluate)

    @contextmanager
    def _in_flow_run(self) -> Iterator[None]:
        os.environ["PREFECT_API_URL"] = self.api_url
        with hydrated_context(cloudpickle.loads(self.context)):
            yield

    def collect(self, config: Any) -> Any:
        with self._in_flow_run():
            return collect_flow(config)

    def train(self, config: Any, resume: bool) -> Any:
        with self._in_flow_run():
            return train_flow(config, resume=resume)

    def evaluate(self, config: Any) -> Any:
        with self._in_flow_run():
            return evaluate_flow(config)


@flow(name="pipeline", log_prints=True)
def pipeline_flow(config: PipelineConfig = PipelineConfig()) -> str:
    """Run evaluate -> [explore] -> collect -> train (replay, baseline) -> evaluate -> report; returns the report's
    path."""
    report = run_pipeline(config, Subflows.of_this_flow_run().stages(), report_task).report
    print(f"report: {report}")
    return str(report)
