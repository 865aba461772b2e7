"""Replay strategies through their public interface (select / add / state_dict)."""

from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tasks.replay import (
    FIFOReplayConfig,
    Group,
    PrioritizedReplayConfig,
    RLEPReplayConfig,
    Rollout,
    make_replay,
)
from tasks.replay.pool import PoolError, load_pool
from tasks.replay.strategies import FIFOReplay, PrioritizedReplay, RLEPReplay


def rollout(pid="p", version=0, reward=1.0, advantage=None, response="r", origin="fresh"):
    return Rollout(problem_id=pid, data_source="d", prompt=f"Q {pid}", gold_answer="1", response=response,
                   response_token_ids=[1, 2], policy_version=version, reward=reward, correct=reward > 0,
                   advantage=advantage, origin=origin, prompt_token_ids=[9])  # fmt: skip


def fresh_groups(step, n_groups=2, g=4, rewards=(0.0, 1.0, 0.0, 1.0)):
    return [Group(f"p{i}", [rollout(f"p{i}", step - 1, rewards[j % len(rewards)], advantage=float(j)) for j in range(g)])
            for i in range(n_groups)]  # fmt: skip


# ---------------------------------------------------------------- RLEP


def test_rlep_adds_m_answers_of_the_same_prompt_without_replacement():
    pool = {"p0": [rollout("p0", response=f"a{i}") for i in range(5)], "p1": [rollout("p1", response="only")]}
    replay = RLEPReplay(RLEPReplayConfig(pool="x", replay_per_group=2), pool, seed=1)
    groups = replay.select(fresh_groups(step=3, n_groups=3), step=3)
    sizes = [len(g.rollouts) for g in groups]
    assert sizes == [6, 5, 4]  # p0: 4 + 2, p1: 4 + its only answer, p2: nothing pooled
    replayed = [r for r in groups[0].rollouts if r.origin == "replay"]
    assert len({r.response for r in replayed}) == 2 and all(r.problem_id == "p0" for r in replayed)
    # Re-scored and re-advantaged with the group; prompt aligned with the fresh answers.
    assert all(r.reward is None and r.advantage is None and r.prompt == "Q p0" for r in replayed)
    assert all(r.reward is not None for r in pool["p0"])  # the pool itself is untouched


def test_rlep_draws_are_uniform_over_the_pooled_answers():
    pool = {"p0": [rollout("p0", response=f"a{i}") for i in range(4)]}
    replay = RLEPReplay(RLEPReplayConfig(pool="x", replay_per_group=1), pool, seed=0)
    counts = Counter(
        r.response for step in range(4000) for r in replay.select(fresh_groups(1, 1), step)[0].rollouts if r.origin == "replay"
    )
    assert set(counts) == {"a0", "a1", "a2", "a3"}
    assert all(abs(c / 4000 - 0.25) < 0.03 for c in counts.values())


def test_rlep_pool_file(tmp_path):
    path = tmp_path / "pool.parquet"
    rows = {"problem_id": ["p0", "p0", "zz"], "data_source": ["d"] * 3, "prompt": ["q"] * 3, "gold_answer": ["1"] * 3,
            "response": ["a", "b", "c"], "response_token_ids": [[1], [2], [3]], "policy_version": [0, 0, 0],
            "correct": [True, True, True]}  # fmt: skip
    pq.write_table(pa.table(rows), path)
    pool = load_pool(tmp_path, problem_ids={"p0", "p1"})
    assert list(pool) == ["p0"] and [r.response for r in pool["p0"]] == ["a", "b"]
    with pytest.raises(PoolError, match="no pooled problem is among the 1 training problems"):
        load_pool(path, problem_ids={"p9"})
    with pytest.raises(PoolError, match="no such pool file"):
        load_pool(tmp_path / "nope.parquet")
    pq.write_table(pa.table({"problem_id": ["p0"]}), tmp_path / "bad.parquet")
    with pytest.raises(PoolError, match="missing columns"):
        load_pool(tmp_path / "bad.parquet")


# ---------------------------------------------------------------- FIFO


def test_fifo_capacity_keeps_the_newest():
    replay = FIFOReplay(FIFOReplayConfig(buffer_size=6, replay_ratio=0.5))
    for step in (1, 2, 3):
        replay.add(fresh_groups(step, n_groups=1, g=4), step)
    assert len(replay.buffer) == 6
    assert [r.policy_version for r in replay.buffer] == [1, 1, 2, 2, 2, 2]


def test_fifo_replay_share_and_no_removal():
    replay = FIFOReplay(FIFOReplayConfig(buffer_size=100, replay_ratio=0.25), seed=0)
    replay.add(fresh_groups(1, n_groups=5, g=4), 1)
    batch = replay.select(fresh_groups(2, n_groups=3, g=4), 2)
    rollouts = [r for g in batch for r in g.rollouts]
    replayed = [r for r in rollouts if r.origin == "replay"]
    assert len(rollouts) == 16 and len(replayed) == 4  # 12 fresh / (1 - 0.25)
    assert all(r.advantage is not None for r in replayed)  # advantages from their own step
    assert len(replay.buffer) == 20  # sampling does not remove


def test_fifo_sampling_is_uniform():
    replay = FIFOReplay(FIFOReplayConfig(buffer_size=10, replay_ratio=0.5), seed=3)
    replay.buffer.extend(rollout(f"q{i}") for i in range(10))
    counts = Counter()
    for step in range(3000):
        batch = replay.select([Group("x", [rollout("x")])], step)
        counts.update(r.problem_id for g in batch for r in g.rollouts if r.origin == "replay")
    assert sum(counts.values()) == 3000 and len(counts) == 10
    assert all(abs(c / 3000 - 0.1) < 0.025 for c in counts.values())


# ---------------------------------------------------------------- prioritized


def test_prioritized_skips_zero_variance_groups_and_evicts_old_rollouts():
    replay = PrioritizedReplay(PrioritizedReplayConfig(max_age=2, replay_fraction=1.0))
    replay.add(fresh_groups(1, n_groups=1, rewards=(1.0,)), 1)  # all rewards equal: not stored
    assert replay.buffer == []
    replay.add(fresh_groups(1, n_groups=1), 1)  # policy_version 0
    replay.add(fresh_groups(3, n_groups=1), 3)  # policy_version 2
    replay.select(fresh_groups(4, n_groups=1), 4)  # at step 4 the version-0 rollouts are 3 updates old
    assert sorted({r.policy_version for r in replay.buffer}) == [2]


def test_prioritized_sampling_follows_abs_advantage():
    config = PrioritizedReplayConfig(priority_alpha=1.0, priority_eps=1e-3, replay_fraction=1.0, max_age=10**6)
    replay = PrioritizedReplay(config, seed=0)
    replay.buffer = [rollout("big", advantage=3.0), rollout("small", advantage=-1.0), rollout("zero", advantage=0.0)]
    counts = Counter()
    for step in range(1, 6001):
        batch = replay.select([Group("f", [rollout("f", version=step - 1)])], step)  # one fresh -> one replayed
        counts.update(r.problem_id for g in batch for r in g.rollouts if r.origin == "replay")
    total = 3.0 + 1.0 + 0.0 + 3 * 1e-3
    for name, priority in (("big", 3.001), ("small", 1.001)):
        assert counts[name] / 6000 == pytest.approx(priority / total, abs=0.02)
    assert counts["zero"] < 30


def test_prioritized_batches_are_fresh_anchored():
    replay = PrioritizedReplay(PrioritizedReplayConfig(replay_fraction=0.5, replay_warmup_steps=2, max_age=100), seed=0)
    replay.add(fresh_groups(1, n_groups=4), 1)
    assert replay.select(fresh_groups(2, n_groups=2), 2) == fresh_groups(2, n_groups=2)  # warm-up: no replay
    fresh = fresh_groups(3, n_groups=2)
    batch = replay.select(fresh, 3)
    assert batch[:2] == fresh  # every fresh rollout kept, in place
    assert sum(len(g.rollouts) for g in batch[2:]) == 4  # 0.5 x 8 fresh, added on top


def test_state_round_trip_continues_the_same_draws():
    for config in (FIFOReplayConfig(buffer_size=50), PrioritizedReplayConfig(replay_fraction=1.0, max_age=100)):
        a = make_replay(config, seed=5)
        a.add(fresh_groups(1, n_groups=5), 1)
        b = make_replay(config, seed=99)
        b.load_state_dict(a.state_dict())
        pick = lambda r: [x.response + x.problem_id + str(x.advantage) for g in r.select(fresh_groups(2), 2) for x in g.rollouts]  # noqa: E731
        assert pick(a) == pick(b)
