"""Prefect flow `study`: every run of a study (each arm at each seed, RLEP's explorations and collections, a
living-pool arm's parts) through the study's one sequence (`tasks.study.run_study`: resolve, plan, record,
execute, gather, write), its executor deciding each run's actions; this flow hands it the carrier of those
actions and publishes the outputs as artifacts. Either way each action's collect, train or evaluate flow is a
subflow of the study's flow run, with its logs and artifacts (`flows/subflows.py`, as in the pipeline).

`runner.kind: local` runs them one after another, each action in a fresh process of its own (`runner.isolate`)
whose subflow is still a child of the study's run. `runner.kind: ray` carries each action out, in the study's
flow run, as a `carry-out` task (named by its run's key) on prefect-ray's `RayTaskRunner`: a local Ray started
for the study (`runner.max_parallel` CPUs), or an existing cluster at `runner.address`. Each asks Ray for
`runner.cpus_per_run` CPUs and `runner.gpus_per_run` GPUs, uses that many torch threads, and runs in a worker
process of its own (started for it, gone after it). Its flow is called inside the task, so it is a child of the
study's flow run through a task run that has the action's task as its parent (Prefect 3 records a flow called in
a task so); the task logs the action's start and end to its Logs tab, its subflow its steps and evaluations to
its own (the worker sends them to the same Prefect API). The executor drives each run in a thread of this
process: a run that needs another's result (RLEP's collection needs its exploration run; the rlep arm needs the
collection) waits for it; everything else runs as soon as resources allow. Finished runs are skipped, so a
killed study resumes where it stopped.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
from prefect import flow
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from rlep.flows.ray_runner import ray_task_runner
from rlep.flows.runlog import send_logs_to_prefect
from rlep.flows.subflows import Subflows, carry_out_task
from rlep.tasks.carry import Action, Outcome
from rlep.tasks.plan import check_plan_inputs
from rlep.tasks.runner import worker_threads
from rlep.tasks.settings.runner import RunnerConfig
from rlep.tasks.study import StudyConfig, plan, run_study
from rlep.tasks.study.report import claims_markdown


@flow(name="study", log_prints=True)
def study_flow(config: StudyConfig = StudyConfig(), command: str | None = None) -> str:
    """Run every (arm, seed) of `config` and write its statistics; returns the report's path."""
    send_logs_to_prefect()
    check_plan_inputs(plan(config))  # a UI-triggered run's sources, before its first run (the CLI checks earlier)
    if config.runner.kind == "ray":
        with ray_task_runner(config.runner) as ray:
            paths = run_study(config, command=command, carry_out=_on_ray(ray, config.runner), parallel=True)
    else:  # each action a subflow of this run: in this process, or (`isolate`) in a fresh one of its own
        paths = run_study(config, command=command, carry_out=Subflows(isolate=config.runner.isolate))
    if "claims" in paths:  # absent when a run of the plan stopped short of its last evaluation: nothing tested
        create_markdown_artifact(key="study-claims", markdown=claims_markdown(pd.read_parquet(paths["claims"])))
    summary = pd.read_parquet(paths["summary"]).round(4)
    create_table_artifact(
        key="study-summary",
        table=summary.astype(object).where(summary.notna(), None).to_dict("records"),
        description="held-out accuracy per arm and step: mean, 95% interval, paired difference to the baseline",
    )
    create_markdown_artifact(key="study-report", markdown=paths["report"].read_text())
    print(f"report: {paths['report']}")
    return str(paths["report"])


def _on_ray(ray, runner: RunnerConfig) -> Callable[[Action], Outcome]:
    """The carrier of an action on Ray: a `carry-out` task of this flow run with the run's resources, in a worker
    process of its own (max_calls=1: started for it, gone after it, so its timings carry nothing an earlier action
    left), waited for here (each run's actions are driven from a thread of its own)."""
    from prefect_ray.context import remote_options

    threads = worker_threads(runner.cpus_per_run)

    def carry_out(action: Action) -> Outcome:
        with remote_options(num_cpus=runner.cpus_per_run, num_gpus=runner.gpus_per_run, max_calls=1):
            future = ray.submit(carry_out_task, {"action": action, "carrier": Subflows(), "threads": threads})
        return future.result()

    return carry_out
