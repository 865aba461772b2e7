"""The deployments `rlep serve` registers: one per flow, all parameters typed (the UI renders their
pydantic settings as forms), plus the scheduled re-collection. One registry; flows do not import it.
`rlep.tasks.settings.serve.ServeConfig` is what `rlep serve` and `rlep ui` take (their flags are its fields)."""

from __future__ import annotations

from rlep.tasks.settings.serve import ServeConfig

# `rlep serve` and `rlep ui` set these of ServeConfig's settings; the rest are the recollect deployment's form
SERVE_FLAGS = {"recollect_cron", "schedule", "recollect.train_dir", "recollect.pool_store"}


def build_deployments(config: ServeConfig | None = None) -> list:
    """RunnerDeployments for collect, train, evaluate, pipeline, study and (on `config.cron`) recollect."""
    # the flows here, not at the top: the command line builds its flags from ServeConfig without loading Prefect
    from rlep.flows.collect import collect_flow
    from rlep.flows.evaluate import evaluate_flow
    from rlep.flows.pipeline import pipeline_flow
    from rlep.flows.recollect import recollect_flow
    from rlep.flows.study import study_flow
    from rlep.flows.train import train_flow

    config = config or ServeConfig()
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
            cron=config.cron,
            parameters={"config": config.recollect.model_dump(mode="json")},
            description="Scheduled: collect from the latest checkpoint, publish a new pool version.",
        ),
    ]


def serve_deployments(config: ServeConfig | None = None) -> None:
    """Register the deployments with the Prefect API and run them when triggered (blocks)."""
    from prefect import serve

    serve(*build_deployments(config))
