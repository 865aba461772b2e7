"""Freshness-aware prioritized replay (FreshPER): the decayed draw probabilities by hand, and the draw it changes."""

import math

import numpy as np
import pytest

from rlep.data.rollout import Group, Rollout
from rlep.tasks.replay.strategies import PrioritizedReplay
from rlep.tasks.settings.replay import PrioritizedReplayConfig


def _rollout(pid, version, advantage, sample=0):
    return Rollout(
        problem_id=pid,
        data_source="d",
        prompt=pid,
        gold_answer="1",
        response=f"{pid}-{sample}",
        response_token_ids=[5, 6],
        policy_version=version,
        reward=float(advantage > 0),
        correct=advantage > 0,
        advantage=advantage,
        sample_index=sample,
    )


def test_freshness_decays_each_priority_by_its_age():
    # At step 5 the trainer is at version 4: rollouts of versions 4, 3 and 1 are 0, 1 and 3 updates old.
    config = PrioritizedReplayConfig(priority_alpha=2.0, priority_eps=0.5, freshness_tau=2.0)
    replay = PrioritizedReplay(config, seed=0)
    replay.buffer = [_rollout("a", 4, 1.0), _rollout("b", 3, -2.5), _rollout("c", 1, 0.0)]
    expected = [1.5**2 * math.exp(0), 3.0**2 * math.exp(-1 / 2), 0.5**2 * math.exp(-3 / 2)]
    assert replay.priorities(step=5).tolist() == pytest.approx(expected)
    draw = replay.priorities(step=5) / replay.priorities(step=5).sum()
    assert draw.tolist() == pytest.approx([p / sum(expected) for p in expected])
    # Off (the prioritized paper): the age plays no part.
    plain = PrioritizedReplay(PrioritizedReplayConfig(priority_alpha=2.0, priority_eps=0.5), seed=0)
    plain.buffer = replay.buffer
    assert plain.priorities(step=5).tolist() == pytest.approx([1.5**2, 3.0**2, 0.5**2])


def _mean_age_of_draws(tau, steps=12):
    """The mean age of the rollouts replayed over `steps` steps of a buffer fed one flat-free group a step."""
    replay = PrioritizedReplay(
        PrioritizedReplayConfig(max_age=8, replay_fraction=1.0, priority_alpha=0.0, freshness_tau=tau), seed=3
    )
    ages = []
    for step in range(1, steps + 1):
        fresh = Group(f"p{step}", [_rollout(f"p{step}", step - 1, a, j) for j, a in enumerate((1.0, -1.0))])
        rows = replay.mix([fresh], step)
        ages += [r.age(step) for r in rows if r.origin == "replay"]
    return float(np.mean(ages))


def test_freshness_draws_younger_rollouts():
    # alpha 0: the plain design draws uniformly over what is stored (ages 1-8); the decay favours the young ones.
    uniform, fresh = _mean_age_of_draws(None), _mean_age_of_draws(1.0)
    assert fresh < uniform - 1


def test_over_capacity_the_lowest_decayed_priority_leaves():
    # Capacity 2: an old answer of |A| 1.0 (6 updates old by the next step) and a fresh group of |A| 0.5 (1 update).
    # Decayed (tau 1), the old one's priority is e^-6 against 0.5 e^-1: it leaves. Undecayed, it would stay.
    def stored(tau):
        config = PrioritizedReplayConfig(buffer_size=2, max_age=100, priority_eps=1e-3, freshness_tau=tau)
        replay = PrioritizedReplay(config, seed=0)
        replay.buffer, replay.drawn = [_rollout("old", 0, 1.0)], [False]
        replay.mix([Group("new", [_rollout("new", 5, 0.5, 0), _rollout("new", 5, -0.5, 1)])], step=6)
        return sorted(r.response for r in replay.buffer)

    assert stored(1.0) == ["new-0", "new-1"]
    assert stored(None) == ["new-0", "old-0"]
