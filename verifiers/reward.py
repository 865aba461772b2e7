"""Turning verdicts into scalar rewards for the trainer.

Two schemes cover the usual RLVR setups: `binary` (1 for a correct answer, 0 otherwise, as in DeepSeek-R1
and DAPO's accuracy reward) and `signed` (+1 / -1, as in DAPO's rule-based reward). A response with no
extractable answer gets the scheme's wrong-answer value unless `no_answer` overrides it, which lets a
run penalise format failures more (or less) than wrong answers.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rlep.verifiers.verdict import Verdict

_SCHEME_VALUES: dict[str, tuple[float, float]] = {"binary": (1.0, 0.0), "signed": (1.0, -1.0)}


class RewardConfig(BaseModel):
    """How a verdict maps to a reward."""

    model_config = ConfigDict(extra="forbid", frozen=True)

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


def reward(verdict: Verdict, config: RewardConfig | None = None) -> float:
    """The scalar reward of one verdict under `config` (binary 1/0 by default)."""
    config = config or RewardConfig()
    right, wrong = _SCHEME_VALUES[config.scheme]
    if verdict.correct:
        return right
    if verdict.reason == "no-answer" and config.no_answer is not None:
        return config.no_answer
    return wrong


def rewards(verdicts: Iterable[Verdict], config: RewardConfig | None = None) -> list[float]:
    """`reward` for each verdict, in order."""
    config = config or RewardConfig()
    return [reward(verdict, config) for verdict in verdicts]
