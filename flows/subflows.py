"""The executor's stages as Prefect subflows: every run of a plan (the pipeline's, a study's) a subflow of the
flow run carrying the plan out, with its own logs and artifacts in the UI.

`Subflows` is made in that flow run and pickles, so a run carried out in a process of its own
(`tasks.execute.execute_in_process`) enters the flow run's context again (Prefect's `serialize_context` /
`hydrated_context`, what its own task runners do) and its collect, train or evaluate flow is still a child of
that run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import cloudpickle
from prefect.context import hydrated_context, serialize_context

from rlep.flows.collect import collect_flow
from rlep.flows.evaluate import evaluate_flow
from rlep.flows.train import train_flow
from rlep.tasks.execute import Stages


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


def subflow_stages() -> Stages:
    """The stages as subflows of the flow run they are called in, in its own process."""
    return Stages(
        collect=collect_flow, train=lambda config, resume: train_flow(config, resume=resume), evaluate=evaluate_flow
    )
