"""Prefect flow `train`: GRPO with experience replay (none | rlep | fifo | prioritized | reuse | refill |
exgrpo) on one policy.

The loop lives in `tasks.training.loop.steps`, reached through `tasks.training.trainer.train` (it holds an engine
and a torch model, which do not travel between tasks); this flow runs it as one task, mirrors its progress
into Prefect artifacts (a progress bar, the latest metrics and evaluation as tables) and the run's Logs tab
(a line per step and evaluation), writes the metrics for `config.tracker` (TensorBoard, MLflow;
tasks/training/loop/tracking.py) and publishes the learning curve. Run it with
`rlep train ...`, from a deployment (`rlep serve`), or `train_flow(TrainConfig(...))` in Python.
"""

from __future__ import annotations

from prefect import flow, task
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)

from rlep.data.run_layout import TrainRunLayout
from rlep.flows.runlog import send_logs_to_prefect
from rlep.tasks.settings.train import TrainConfig
from rlep.tasks.training.trainer import TrainResult, train

METRIC_COLUMNS = (
    "step",
    "reward_mean",
    "accuracy",
    "zero_std_group_frac",
    "replay_share",
    "replay_pool_version",
    "optimizer_updates",
    "clip_frac_high",
    "entropy",
    "grad_norm",
    "time_step",
)


def _rounded(row: dict) -> dict:
    """Floats rounded for a table artifact; NaN (e.g. no pool version: a pool file, not a store) as empty."""
    return {k: (None if v != v else round(v, 4)) if isinstance(v, float) else v for k, v in row.items()}


@task(name="run-training")
def run_training(config: TrainConfig, resume: bool = False, progress: bool = True) -> TrainResult:
    """The training loop (`tasks.training.trainer.train`), reporting into artifacts, logs and the tracker as it goes."""
    send_logs_to_prefect()
    artifact = None

    def on_step(row: dict, eval_rows: list[dict] | None) -> None:
        nonlocal artifact
        if artifact is None:
            artifact = create_progress_artifact(progress=0.0, description=f"training {config.resolved_run_id()}")
        update_progress_artifact(artifact_id=artifact, progress=100.0 * row["step"] / config.steps)
        if eval_rows:
            create_table_artifact(
                key="train-eval",
                table=[_rounded(r) for r in eval_rows],
                description=f"held-out evaluation at step {row['step']}",
            )
        if row["step"] and row.get("reward_mean") is not None:
            create_table_artifact(
                key="train-metrics",
                table=[_rounded({k: row[k] for k in METRIC_COLUMNS if k in row})],
                description=f"metrics of step {row['step']}",
            )

    return train(config, resume=resume, progress=progress, on_step=on_step)


@flow(name="train", log_prints=True)
def train_flow(config: TrainConfig = TrainConfig(), resume: bool = False) -> TrainResult:
    """Train `config.model` with `config.replay`; writes metrics, evaluation, checkpoints and rollouts under
    `config.out`."""
    result = run_training(config, resume=resume)
    create_markdown_artifact(
        key="train-summary",
        markdown=(
            f"# Training `{config.replay.kind}` ({result.steps} steps)\n\n"
            f"- run directory: `{result.out}`\n- final checkpoint: `{result.final_checkpoint}`\n"
            f"- metrics: `{result.metrics_path}`\n- evaluation: `{result.eval_path}`\n"
            f"- learning curve: `{TrainRunLayout(result.out).learning_curve}`\n"
        ),
    )
    return result
