"""Reward helpers: (verdict, config, expected reward) table."""

from __future__ import annotations

import pytest

from rlep.tasks.settings.reward import RewardConfig
from rlep.verifiers import Verdict, reward, rewards

RIGHT = Verdict(correct=True, extracted="3", reason="equal", seconds=0.0)
WRONG = Verdict(correct=False, extracted="4", reason="not-equal", seconds=0.0)
MISSING = Verdict(correct=False, extracted=None, reason="no-answer", seconds=0.0)
TIMED_OUT = Verdict(correct=False, extracted=None, reason="timeout", seconds=5.0)


@pytest.mark.parametrize(
    ("verdict", "config", "expected"),
    [
        (RIGHT, RewardConfig(), 1.0),
        (WRONG, RewardConfig(), 0.0),
        (MISSING, RewardConfig(), 0.0),
        (TIMED_OUT, RewardConfig(), 0.0),
        (RIGHT, RewardConfig(scheme="signed"), 1.0),
        (WRONG, RewardConfig(scheme="signed"), -1.0),
        (MISSING, RewardConfig(scheme="signed"), -1.0),
        (TIMED_OUT, RewardConfig(scheme="signed"), -1.0),
        (MISSING, RewardConfig(no_answer=-0.5), -0.5),
        (WRONG, RewardConfig(no_answer=-0.5), 0.0),
        (RIGHT, RewardConfig(scheme="signed", no_answer=-2.0), 1.0),
    ],
)
def test_reward(verdict, config, expected):
    assert reward(verdict, config) == expected


def test_default_config_and_batch_helper():
    assert reward(RIGHT) == 1.0
    assert rewards([RIGHT, WRONG, MISSING], RewardConfig(scheme="signed")) == [1.0, -1.0, -1.0]


@pytest.mark.parametrize("bad", [{"scheme": "ternary"}, {"no_answer": 100}, {"typo": 1}])
def test_reward_config_is_strict(bad):
    with pytest.raises(ValueError):
        RewardConfig(**bad)
