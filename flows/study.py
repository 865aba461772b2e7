"""Prefect flow `study`: every run of a study (each arm at each seed, RLEP's explorations and collections, a
living-pool arm's parts) carried out by the executor's loop (`tasks.execute.execute_plan`), in parallel on Ray
when asked. Either way each run's collect, train and evaluate flows are subflows of the study's flow run, with
their logs and artifacts (`flows/subflows.py`, as in the pipeline).

`runner.kind: local` runs them one after another, each in a fresh process of its own (`runner.isolate`) whose
subflows are still children of the study's run. `runner.kind: ray` submits each run, in the study's flow run,
as a `study-run` task (named by its key) to prefect-ray's `RayTaskRunner`: a local Ray started for the study
(`runner.max_parallel` CPUs), or an existing cluster at `runner.address`. Each run asks Ray for
`runner.cpus_per_run` CPUs and `runner.gpus_per_run` GPUs, uses that many torch threads, and runs in a worker
process of its own (started for it, gone after it). Its flows are called inside the task, so each is a child
of the study's flow run through a task run that has the run's task as its parent (Prefect 3 records a flow
called in a task so); the task logs the run's start and end to its Logs tab, its subflows their steps and
evaluations to theirs (the worker sends them to the same Prefect API). A run that needs another's result
(RLEP's collection needs its exploration run; the rlep arm needs the collection) waits for it; everything
else runs as soon as resources allow. Finished runs are skipped, so a killed study resumes where it stopped.
"""

from __future__ import annotations

import logging

import pandas as pd
from prefect import flow, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from rlep.flows.ray_runner import ray_task_runner
from rlep.flows.runlog import flush_prefect_logs, send_logs_to_prefect
from rlep.flows.subflows import Subflows, subflow_stages
from rlep.tasks.runner import worker_threads
from rlep.tasks.study import (
    StudyConfig,
    accepted_answers,
    execute_in_process,
    execute_plan,
    execute_run,
    fix_record,
    gather,
    plan,
    with_models_resolved,
    write_study_outputs,
)
from rlep.tasks.study.report import claims_markdown

log = logging.getLogger("rlep.study")


@task(name="study-run", task_run_name="{run.key}")
def study_run_task(run, needs: dict, threads: int | None = None) -> dict:
    """One run on a Ray worker (a process of its own), with `threads` torch threads, its stages as subflows."""
    send_logs_to_prefect()  # in this process: the worker's
    log.info(f"{run.kind} run {run.key}: {run.config.out}")
    try:
        record = execute_run(run, needs, subflow_stages(), progress=False, threads=threads)
        log.info(f"{run.key} done")
        return record
    finally:
        flush_prefect_logs()  # a Ray worker may be stopped as soon as its last task returns


@flow(name="study", log_prints=True)
def study_flow(config: StudyConfig = StudyConfig(), command: str | None = None) -> str:
    """Run every (arm, seed) of `config` and write its statistics; returns the report's path."""
    send_logs_to_prefect()
    config = with_models_resolved(config)
    runs = plan(config)
    fix_record(config, runs)  # before the first run: the plan and claims the report will test, with their digest
    if config.runner.kind == "ray":
        _submit_on_ray(config, runs)
    elif config.runner.isolate:  # each run in a process of its own, its subflow a child of this run
        stages = Subflows.of_this_flow_run().stages()
        execute_plan(runs, lambda run, needs: execute_in_process(run, needs, progress=False, stages=stages))
    else:
        execute_plan(runs, lambda run, needs: execute_run(run, needs, subflow_stages(), progress=False))
    study, final = gather(runs)
    paths = write_study_outputs(config, study, final, command, accepted_answers(runs))
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


def _submit_on_ray(config: StudyConfig, runs) -> dict:
    """Submit every run to Ray as a task of this flow run, with its resources; a run waits for the runs it needs."""
    from prefect_ray.context import remote_options

    runner = config.runner
    threads = worker_threads(runner.cpus_per_run)
    with ray_task_runner(runner) as ray:

        def submit(run, needs: dict):
            # max_calls=1: each run gets a fresh worker process, so its timings carry nothing an earlier run left
            with remote_options(num_cpus=runner.cpus_per_run, num_gpus=runner.gpus_per_run, max_calls=1):
                parameters = {"run": run, "needs": needs, "threads": threads}
                return ray.submit(study_run_task, parameters, wait_for=list(needs.values()))

        futures = execute_plan(runs, submit)
        return {key: future.result() for key, future in futures.items()}
