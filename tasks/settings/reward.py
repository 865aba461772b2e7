"""How a verdict becomes a reward: the settings of the reward schemes (`binary`, `signed`, and the value of a
response without an answer). The rewards themselves are verifiers/reward.py's."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rlep.tasks.settings.strict import SETTINGS


class RewardConfig(BaseModel):
    """How a verdict maps to a reward."""

    model_config = ConfigDict(**SETTINGS, frozen=True)

    scheme: Literal["binary", "signed"] = Field(
        default="binary",
        description="`binary`: correct 1, wrong 0. `signed`: correct +1, wrong -1 (DAPO's rule-based reward).",
    )
    no_answer: float | None = Field(
        default=None,
        ge=-10,
        le=10,
        description="Reward when no answer was found in the response (reason `no-answer`); None means "
        "the scheme's wrong-answer value.",
    )
