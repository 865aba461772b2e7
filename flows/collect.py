"""Prefect flow `collect`: Phase I, a verified experience pool in Parquet.

DAG per shard: generate-shard -> verify-shard (each writes a file and returns its path), then
build-pool-and-manifest, then artifacts: a table per data source (accuracy, pass@k), a markdown summary
with paths and throughput, and a progress artifact updated as shards complete. The work is in
`tasks.collect`; this flow only wires it to Prefect.

With `runner.kind: ray` the shards run as `collect-shard-N` tasks of a subflow on Prefect's Ray task runner
(a local Ray, or a cluster at `runner.address`): each Ray worker starts its own engine once and samples the
shards it is given, so generation is data-parallel over workers (on GPUs: `runner.gpus_per_run` each). Run it with
`rlep collect ...`, from a deployment
(`rlep serve`), or `collect_flow(CollectConfig(...))`.
"""

from __future__ import annotations

import logging
from pathlib import Path

from prefect import flow, task
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.futures import as_completed

from rlep.data.inspect import summarize
from rlep.data.problem import Problem
from rlep.data.run_layout import CollectRunLayout
from rlep.flows.ray_runner import ray_task_runner
from rlep.flows.runlog import send_logs_to_prefect
from rlep.tasks.collect import finalize, generate_shard, run_collection, verify_shard
from rlep.tasks.engines.cache import release_engines
from rlep.tasks.runner import limit_threads, worker_threads
from rlep.tasks.settings.collect import CollectConfig
from rlep.tasks.settings.runner import RunnerConfig

generate_task = task(generate_shard, name="generate-shard", task_run_name="generate-shard-{shard}")
verify_task = task(verify_shard, name="verify-shard", task_run_name="verify-shard-{shard}")
finalize_task = task(finalize, name="build-pool-and-manifest")
log = logging.getLogger("rlep.collect")


@task(name="publish-collection-artifacts")
def publish_artifacts(run_dir: str) -> dict:
    """Per-data-source table, a sample of verified answers, and a markdown summary of the run."""
    summary = summarize(run_dir, sample_rows=5)
    create_table_artifact(
        key="collect-accuracy-by-source",
        table=summary["accuracy"],
        description="mean@n and unbiased pass@k per data source",
    )
    if summary.get("sample_rows"):
        create_table_artifact(
            key="collect-sample-answers",
            table=summary["sample_rows"],
            description="a few trajectories (text truncated)",
        )
    create_markdown_artifact(key="collect-summary", markdown=markdown_summary(summary, run_dir))
    return summary


def markdown_summary(summary: dict, run_dir: str) -> str:
    run, layout = Path(run_dir), CollectRunLayout(run_dir)
    pool = summary.get("pool") or {}
    lines = [
        f"# Collection `{run.name}`",
        "",
        f"- problems: {summary['problems']}, answers: {summary['samples']}, verified correct: {summary['correct']}",
        f"- pool: {pool.get('rows', 'n/a')} answers for {pool.get('problems', 'n/a')} problems",
        f"- files: `{layout.trajectories}`, `{layout.pool}`, `{layout.manifest}`",
    ]
    throughput = summary.get("run") or {}
    if throughput:
        lines.append(f"- throughput: {throughput}")
    return "\n".join(lines) + "\n"


@task(name="collect-shard", task_run_name="collect-shard-{shard}")
def shard_task(
    config: CollectConfig, model: str, shard: int, problems: list[Problem], threads: int | None = None
) -> str:
    """generate -> verify of one shard inside a worker, with that worker's own (cached) engine on `threads` threads."""
    if threads is not None:
        limit_threads(threads)
    return str(verify_shard(config, shard, generate_shard(config, model, shard, problems)))


@flow(name="collect-shards")
def shards_flow(
    config: CollectConfig,
    model: str,
    work: list[tuple[int, list[Problem]]],
    cpus: float,
    gpus: float,
    artifact: str | None = None,
) -> list[str]:
    """Submit every shard with its resources; the progress artifact moves as each one is written."""
    from prefect_ray.context import remote_options

    with remote_options(num_cpus=cpus, num_gpus=gpus):
        futures = [shard_task.submit(config, model, shard, problems, worker_threads(cpus)) for shard, problems in work]
    written = []
    for future in as_completed(futures):
        written.append(future.result())
        log.info(f"shards sampled and verified: {len(written)}/{len(work)}")
        if artifact is not None:
            update_progress_artifact(artifact_id=artifact, progress=100.0 * len(written) / len(work))
    return written


@flow(name="collect", log_prints=True)
def collect_flow(config: CollectConfig = CollectConfig(), runner: RunnerConfig = RunnerConfig()) -> dict:
    """Sample, verify and store answers for `config.problems`; build the experience pool."""
    send_logs_to_prefect()
    artifact = create_progress_artifact(progress=0.0, description=f"collection {config.resolved_run_id()}")

    def on_shard(done: int, total: int) -> None:
        log.info(f"shards sampled and verified: {done}/{total}")
        update_progress_artifact(artifact_id=artifact, progress=100.0 * done / total)

    def on_ray(config: CollectConfig, model: str, work: list[tuple[int, list[Problem]]]) -> None:
        shards_flow.with_options(task_runner=ray_task_runner(runner))(
            config, model, work, runner.cpus_per_run, runner.gpus_per_run, str(artifact)
        )

    try:
        result = run_collection(
            config,
            generate=generate_task,
            verify=verify_task,
            finish=finalize_task,
            on_shard=on_shard,
            run_shards=on_ray if runner.kind == "ray" else None,
        )
    finally:
        release_engines()
    update_progress_artifact(artifact_id=artifact, progress=100.0)
    pool = result["pool"]
    log.info(
        f"answers: {pool['samples']}, correct: {pool['correct']}, pool: {pool['pool_rows']} answers; "
        + ", ".join(f"{k} {v:.1f} s" for k, v in result["timings"].items())
        + "".join(f"; left out: {reason} {count}" for reason, count in sorted(result.get("left_out", {}).items()))
    )
    publish_artifacts(result["run_dir"])
    return result
