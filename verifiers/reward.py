"""Turning verdicts into scalar rewards for the trainer.

Two schemes cover the usual RLVR setups: `binary` (1 for a correct answer, 0 otherwise, as in DeepSeek-R1
and DAPO's accuracy reward) and `signed` (+1 / -1, as in DAPO's rule-based reward). A response with no
extractable answer gets the scheme's wrong-answer value unless `no_answer` overrides it, which lets a
run penalise format failures more (or less) than wrong answers.
"""

from __future__ import annotations

from collections.abc import Iterable

from rlep.tasks.settings.reward import RewardConfig
from rlep.verifiers.verdict import Verdict

_SCHEME_VALUES: dict[str, tuple[float, float]] = {"binary": (1.0, 0.0), "signed": (1.0, -1.0)}


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
