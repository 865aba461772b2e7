"""What `rlep serve` and `rlep ui` take: the deployments' settings (the scheduled re-collection and its
default parameters; `ServeConfig`) and where the UI's server listens (`ServerConfig`). The deployments are
flows/deployments.py's, the server flows/server.py's."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from rlep.tasks.settings.paths import UserPath
from rlep.tasks.settings.recollect import RecollectConfig
from rlep.tasks.settings.strict import SETTINGS

DEFAULT_RECOLLECT_CRON = "0 3 * * *"  # daily, 03:00


class ServeConfig(BaseModel):
    """The deployments' settings: recollect's schedule and its default parameters."""

    model_config = SETTINGS

    recollect_cron: str = Field(
        DEFAULT_RECOLLECT_CRON,
        description="Cron schedule of the recollect deployment (the default: daily at 03:00).",
        json_schema_extra={"cli_metavar": "CRON"},
    )
    schedule: bool = Field(
        True,
        description="Register recollect on its cron schedule (--no-schedule: register it without one).",
        json_schema_extra={"cli_flag": "no_schedule", "cli_switch": True},
    )
    recollect: RecollectConfig = Field(
        default_factory=RecollectConfig, description="The recollect deployment's parameters (`rlep serve` sets two)."
    )

    @property
    def cron(self) -> str | None:
        return self.recollect_cron if self.schedule else None


class ServerConfig(BaseModel):
    """Where `rlep ui`'s server listens and keeps its database (`start_server`'s host, port and home)."""

    model_config = SETTINGS

    host: str = Field("127.0.0.1", description="Address to listen on.")
    port: int = Field(4200, ge=1, le=65535, description="Port of the UI and API.")
    home: UserPath = Field(Path(".prefect"), description="PREFECT_HOME for the server's database.")
