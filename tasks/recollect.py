"""Settings of a re-collection: sample from the latest checkpoint of a training run, verify, and add the
new verified successes to a versioned pool store (`data.pool.PoolStore`). Run on a schedule by the
`recollect` deployment of `rlep serve`."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from rlep.data.pool import PoolStore
from rlep.tasks.collect_config import CollectConfig


class RecollectConfig(BaseModel):
    """Collect from the newest policy and publish a new pool version."""

    model_config = ConfigDict(extra="forbid")

    train_dir: Path | None = Field(
        None, description="Training run whose latest checkpoint is sampled; empty: `collect.model` is sampled."
    )
    pool_store: Path = Field(
        Path("runs/pools"), description="Pool store: versions v0001, v0002, ... and the collection runs behind them."
    )
    collect: CollectConfig = Field(
        default_factory=CollectConfig, description="Collection settings (model and out are set per run)."
    )
    keep_versions: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="After publishing, keep only this many newest pool versions (null: keep all). A training run that "
        "pinned, or is resuming with, a removed version stops with an error naming it; one following the store moves "
        "on.",
    )

    def collection(self, now: datetime | None = None) -> CollectConfig:
        """This run's collection settings: the newest checkpoint, a fresh run directory under the store."""
        model = self.collect.model
        if self.train_dir is not None:
            # here, not at the top: `rlep serve`'s flags are built from this model without loading torch
            from rlep.tasks.training.backends.checkpoint import CheckpointError, latest_checkpoint

            checkpoint = latest_checkpoint(self.train_dir)
            if checkpoint is None:
                raise CheckpointError(f"train_dir {self.train_dir}: no checkpoint to collect from yet")
            model = str(checkpoint)
        stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
        return self.collect.model_copy(
            update={
                "model": model,
                "out": PoolStore(self.pool_store).collection_run(stamp),
                "run_id": f"recollect-{stamp}",
            }
        )
