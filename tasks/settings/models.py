"""The settings of the commands that fetch or build a model: `rlep tiny-model` (`TinyModelBuild`: where and how
data/tiny_model/build.py builds; what it builds is its own recipe) and `rlep real-model` (`RealModelRequest`,
tasks/real_model.py), and the names of the real models both name resolution and the fetching offer."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from rlep.tasks.settings.paths import UserPath
from rlep.tasks.settings.strict import SETTINGS

# Real pretrained models fetched from a registry package and converted once (tasks/real_model.py).
REAL_MODEL_NAMES = ("smollm2",)


class TinyModelBuild(BaseModel):
    """How `rlep tiny-model` builds: `build_tiny_model`'s directory, force, progress and threads (what it builds is
    TinyModelConfig, whose fingerprint these leave alone)."""

    model_config = SETTINGS

    out: UserPath | None = Field(None, description="Directory for the model (none: the cache, see docs/tiny_model.md).")
    force: bool = Field(
        False, description="Rebuild even if a complete build is there.", json_schema_extra={"cli_switch": True}
    )
    quiet: bool = Field(False, description="No progress bar.", json_schema_extra={"cli_switch": True})
    threads: int = Field(1, ge=1, description="torch threads for the build (see docs/tiny_model.md).")


class RealModelRequest(BaseModel):
    """`rlep real-model`'s settings: `ensure_real_model`'s name, force and progress."""

    model_config = SETTINGS

    name: Literal[REAL_MODEL_NAMES] = Field(
        "smollm2", description="Real model to fetch.", json_schema_extra={"cli_positional": True}
    )
    force: bool = Field(
        False,
        description="Convert again even if a complete conversion is cached.",
        json_schema_extra={"cli_switch": True},
    )
    quiet: bool = Field(False, description="No progress messages.", json_schema_extra={"cli_switch": True})
