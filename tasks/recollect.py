"""A re-collection's run: sample from the latest checkpoint of a training run (or the collection's model), in a
fresh run directory of a pool store (`data.pool.PoolStore`), as a new version of the store once verified. Its
settings are `rlep.tasks.settings.recollect.RecollectConfig`; run on a schedule by the `recollect` deployment of
`rlep serve`."""

from __future__ import annotations

from datetime import datetime, timezone

from rlep.data.pool import PoolStore
from rlep.tasks.settings.collect import CollectConfig
from rlep.tasks.settings.recollect import RecollectConfig


def collection(config: RecollectConfig, now: datetime | None = None) -> CollectConfig:
    """The collection settings of a run of `config`: the newest checkpoint, a fresh run directory under the store."""
    model = config.collect.model
    if config.train_dir is not None:
        # here, not at the top: only a re-collection from a training run's checkpoint loads torch
        from rlep.tasks.training.backends.checkpoint import CheckpointError, latest_checkpoint

        checkpoint = latest_checkpoint(config.train_dir)
        if checkpoint is None:
            raise CheckpointError(f"train_dir {config.train_dir}: no checkpoint to collect from yet")
        model = str(checkpoint)
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    return config.collect.model_copy(
        update={
            "model": model,
            "out": PoolStore(config.pool_store).collection_run(stamp),
            "run_id": f"recollect-{stamp}",
        }
    )
