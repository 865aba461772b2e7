"""The deployments `rlep serve` registers: one per flow, all parameters typed (the UI renders their
pydantic settings as forms), plus the scheduled re-collection. One registry; flows do not import it."""

from __future__ import annotations

from pathlib import Path

from rlep.flows.collect import collect_flow
from rlep.flows.evaluate import evaluate_flow
from rlep.flows.pipeline import pipeline_flow
from rlep.flows.recollect import recollect_flow
from rlep.flows.study import study_flow
from rlep.flows.train import train_flow
from rlep.tasks.recollect import RecollectConfig

DEFAULT_RECOLLECT_CRON = "0 3 * * *"  # daily, 03:00


def build_deployments(
    recollect_cron: str | None = DEFAULT_RECOLLECT_CRON,
    train_dir: Path | None = None,
    pool_store: Path = Path("runs/pools"),
) -> list:
    """RunnerDeployments for collect, train, evaluate, pipeline, study and (on `recollect_cron`) recollect."""
    recollect = RecollectConfig(train_dir=train_dir, pool_store=pool_store)
    tags = ["rlep"]
    return [
        collect_flow.to_deployment(name="collect", tags=tags, description="Phase I: verified experience pool."),
        train_flow.to_deployment(name="train", tags=tags, description="Phase II: GRPO with replay."),
        evaluate_flow.to_deployment(name="evaluate", tags=tags, description="avg@K / pass@K / maj@K of a checkpoint."),
        pipeline_flow.to_deployment(
            name="pipeline", tags=tags, description="(explore ->) collect -> train (+ baseline) -> evaluate -> report."
        ),
        study_flow.to_deployment(
            name="study",
            tags=tags,
            description="Replay designs compared over seeds: paired t intervals, claims fixed in the config, compute "
            "charged in full.",
        ),
        recollect_flow.to_deployment(
            name="recollect",
            tags=tags,
            cron=recollect_cron,
            parameters={"config": recollect.model_dump(mode="json")},
            description="Scheduled: collect from the latest checkpoint, publish a new pool version.",
        ),
    ]


def serve_deployments(**kwargs) -> None:
    """Register the deployments with the Prefect API and run them when triggered (blocks)."""
    from prefect import serve

    serve(*build_deployments(**kwargs))
