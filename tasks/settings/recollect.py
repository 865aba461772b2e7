"""The settings of a re-collection, run on a schedule by the `recollect` deployment of `rlep serve`: sample the
latest checkpoint of a training run, verify, and publish the new verified successes as a new version of a pool
store. Each run's collection settings are `tasks.recollect.collection`'s."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from rlep.tasks.settings.collect import CollectConfig
from rlep.tasks.settings.paths import UserPath
from rlep.tasks.settings.strict import SETTINGS


class RecollectConfig(BaseModel):
    """Collect from the newest policy and publish a new pool version."""

    model_config = SETTINGS

    train_dir: UserPath | None = Field(
        None, description="Training run whose latest checkpoint is sampled; empty: `collect.model` is sampled."
    )
    pool_store: UserPath = Field(
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
