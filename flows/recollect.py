"""Prefect flow `recollect`: collect from the latest checkpoint and publish a new pool version.

collect (subflow, from `train_dir`'s newest checkpoint) -> publish-pool-version (merge into the store,
lineage recorded) -> artifacts (the new version per data source, its lineage). Scheduled daily by
`rlep serve` (see `--recollect-cron`); training then takes the store (latest version) or a version dir.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
from prefect import flow, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from rlep.data.pool import PoolStore
from rlep.data.run_layout import CollectRunLayout, PoolVersionLayout
from rlep.flows.collect import collect_flow
from rlep.tasks.recollect import collection as recollection
from rlep.tasks.settings.recollect import RecollectConfig


@task(name="publish-pool-version")
def publish_version(pool_store: str, pool_file: str, contribution: dict) -> str:
    return str(PoolStore(pool_store).publish(Path(pool_file), contribution))


@task(name="publish-pool-artifacts")
def pool_artifacts(version_dir: str) -> None:
    version = PoolVersionLayout(version_dir)
    pool = pq.read_table(version.pool, columns=["data_source", "problem_id"]).to_pandas()
    per_source = (
        pool.groupby("data_source")
        .agg(answers=("problem_id", "size"), problems=("problem_id", "nunique"))
        .reset_index()
    )
    create_table_artifact(
        key="pool-by-data-source", table=per_source.to_dict("records"), description=f"pool {version.root.name}"
    )
    lineage = version.lineage.read_text()
    create_markdown_artifact(
        key="pool-lineage", markdown=f"# Pool {version.root.name}\n\n`{version.pool}`\n\n```json\n{lineage}\n```\n"
    )


@flow(name="recollect", log_prints=True)
def recollect_flow(config: RecollectConfig = RecollectConfig()) -> str:
    """Sample the newest policy, verify, and add its verified successes as a new pool version."""
    collection = recollection(config)
    result = collect_flow(collection)
    run = CollectRunLayout(result["run_dir"])
    contribution = {
        "run_dir": result["run_dir"],
        "model": collection.model,
        "policy_version": collection.resolved_policy_version(),
        "manifest": str(run.manifest),
    }
    version = publish_version(str(config.pool_store), str(run.pool), contribution)
    pool_artifacts(version)
    print(f"new pool version: {version}")
    if config.keep_versions is not None:
        removed = PoolStore(config.pool_store).prune(config.keep_versions)
        if removed:
            print(
                f"pruned pool versions {', '.join(f'v{v:04d}' for v in removed)} (keep_versions {config.keep_versions})"
            )
    return version
