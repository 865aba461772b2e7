"""What `rlep inspect` summarises and how; the summary is data/inspect.py's."""

from __future__ import annotations

from pydantic import BaseModel, Field

from rlep.tasks.settings.strict import SETTINGS


class InspectConfig(BaseModel):
    """What `rlep inspect` reads and how it shows it (`summarize`'s path and sample rows, `render` or JSON)."""

    model_config = SETTINGS

    path: str = Field(
        description="Run directory, trajectories directory, .parquet file, or pool store (lists its versions).",
        json_schema_extra={"cli_positional": True},
    )
    as_json: bool = Field(
        False, description="Print the summary as JSON.", json_schema_extra={"cli_flag": "json", "cli_switch": True}
    )
    rows: int = Field(3, ge=0, description="Sample rows to show.")
