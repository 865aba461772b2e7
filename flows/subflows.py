"""The executor's actions carried out as Prefect subflows: each collect, train or evaluate a subflow of the flow run
carrying a plan out (the pipeline's, a study's), with its own logs and artifacts in the UI.

The executor (`tasks.execute`) decides each run's next action; `Subflows` carries it out and returns, calling
nothing back: in this process, or (`isolate`) as a `carry-out` task on a process pool of one made for it
(Prefect's `ProcessPoolTaskRunner`, a fresh spawned process), so its timings carry nothing an earlier run left
behind while its flow is still a child of this flow run. The study submits the same task to Ray
(`flows/study.py`).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from typing import Any

from prefect import task
from prefect.cache_policies import NONE

from rlep.flows.collect import collect_flow
from rlep.flows.evaluate import evaluate_flow
from rlep.flows.runlog import flush_prefect_logs, send_logs_to_prefect
from rlep.flows.train import train_flow
from rlep.tasks.carry import Action, Outcome
from rlep.tasks.runner import limit_threads

log = logging.getLogger("rlep.carry")


@dataclass(frozen=True)
class Subflows:
    """Carries an action out as a subflow of the flow run it is called in; with `isolate`, in a fresh process."""

    isolate: bool = False

    def __call__(self, action: Action) -> Outcome:
        if self.isolate:
            return _in_fresh_process(replace(self, isolate=False), action)
        if action.kind == "train":
            return Outcome(self.train(action.config, action.resume), os.getpid())
        stage = self.collect if action.kind == "collect" else self.evaluate
        return Outcome(stage(action.config), os.getpid())

    def collect(self, config: Any) -> Any:
        return collect_flow(config)

    def train(self, config: Any, resume: bool) -> Any:
        return train_flow(config, resume=resume)

    def evaluate(self, config: Any) -> Any:
        return evaluate_flow(config)


@task(name="carry-out", task_run_name="{action.key}", cache_policy=NONE)
def carry_out_task(action: Action, carrier: Subflows, threads: int | None = None) -> Outcome:
    """One action in a worker process (a process pool's, a Ray worker's) with `threads` torch threads, its subflow
    a child of the flow run through this task run."""
    send_logs_to_prefect()  # in this process: the worker's
    if threads is not None:  # one action per Ray worker: its share of the cores, not all of them
        limit_threads(threads)
    log.info(f"{action.kind} run {action.key}: {action.config.out}")
    try:
        outcome = carrier(action)
        log.info(f"{action.key} done")
        return outcome
    finally:
        flush_prefect_logs()  # a worker may be stopped as soon as its last task returns


def _in_fresh_process(carrier: Subflows, action: Action) -> Outcome:
    """`carrier(action)` as a `carry-out` task of this flow run on a process pool of one, made for it: a fresh
    spawned process, gone after it."""
    from prefect.client.orchestration import get_client
    from prefect.task_runners import ProcessPoolTaskRunner

    with get_client(sync_client=True) as client:
        api_url = str(client.api_url)
    # The worker reports to this flow's server, whose address an ephemeral server (`rlep pipeline` without one)
    # holds only in memory: the pool passes this process's environment on.
    before = os.environ.get("PREFECT_API_URL")
    os.environ["PREFECT_API_URL"] = api_url
    try:
        with ProcessPoolTaskRunner(max_workers=1) as runner:
            return runner.submit(carry_out_task, {"action": action, "carrier": carrier}).result()
    finally:
        if before is None:
            os.environ.pop("PREFECT_API_URL", None)
        else:
            os.environ["PREFECT_API_URL"] = before
