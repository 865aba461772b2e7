"""What to do with prompts too long for the model's context: the setting of the check that data/prompt_length.py
makes before sampling."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from rlep.tasks.settings.strict import SETTINGS


class PromptLengthConfig(BaseModel):
    """What to do with prompts too long for the model's context."""

    model_config = SETTINGS

    overlong_prompts: Literal["error", "filter"] = Field(
        "error",
        description="A prompt whose tokens plus max new tokens exceed the model's context: `error` stops "
        "before sampling, naming the longest; `filter` leaves such problems out and reports how many (as "
        "verl's data.filter_overlong_prompts).",
    )
