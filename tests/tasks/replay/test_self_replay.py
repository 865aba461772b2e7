"""Replay from the run itself (`reuse`, `refill`) on hand-built, verified rollouts, with hand-computed advantages."""

import math
from types import SimpleNamespace

import pytest

from rlep.data.rollout import Group, Rollout
from rlep.tasks.replay import make_replay
from rlep.tasks.replay.self_replay import RefillReplay, ReuseReplay
from rlep.tasks.settings.replay import RefillReplayConfig, ReuseReplayConfig
from rlep.tasks.settings.train import LossConfig
from rlep.tasks.training.loop.step_metrics import PhaseTimer, step_row
from rlep.tasks.training.maths.advantages import fill_advantages


def rollout(pid, step, reward, name, source="d"):
    """A fresh answer to `pid` sampled at `step` (policy version step - 1), verified: correct iff reward > 0."""
    return Rollout(
        problem_id=pid,
        data_source=source,
        prompt=f"Q {pid}",
        gold_answer="1",
        response=name,
        response_token_ids=[1, 2],
        policy_version=step - 1,
        prompt_token_ids=[9],
        reward=reward,
        correct=reward > 0,
    )


def group(pid, step, rewards, tag=""):
    return Group(pid, [rollout(pid, step, r, f"{pid}@{step}{tag}#{i}") for i, r in enumerate(rewards)])


def replayed(groups):
    return [r for g in groups for r in g.rollouts if r.origin == "replay"]


def reuse(**settings):
    return ReuseReplay(ReuseReplayConfig(**settings), seed=0)


# ---------------------------------------------------------------- reuse


def test_an_all_wrong_group_gets_two_banked_answers_and_the_hand_computed_advantages():
    replay = reuse(replay_per_group=2)
    replay.mix([group("p", 1, [1.0, 1.0, 0.0, 0.0])], 1)  # two successes banked at step 1
    groups = replay.join([group("p", 2, [0.0, 0.0, 0.0, 0.0])], 2)
    assert [r.origin for r in groups[0].rollouts] == ["fresh"] * 4 + ["replay"] * 2
    assert {r.response for r in replayed(groups)} == {"p@1#0", "p@1#1"}
    assert all(r.advantage is None and r.reward == 1.0 for r in replayed(groups))  # scored in the step's group
    # Rewards [0, 0, 0, 0, 1, 1]: mean 1/3; squared deviations 4 x 1/9 + 2 x 4/9 = 4/3, over n - 1 = 5: std sqrt(4/15).
    assert fill_advantages(groups, LossConfig()) == 0.0  # the group is no longer flat
    std = math.sqrt(4 / 15)
    expected = [(-1 / 3) / std] * 4 + [(2 / 3) / std] * 2  # -0.6455 x 4, +1.2910 x 2
    assert [r.advantage for r in groups[0].rollouts] == pytest.approx(expected, abs=1e-5)


def test_all_wrong_leaves_a_group_with_one_correct_answer_alone():
    replay = reuse(replay_per_group=2)
    replay.mix([group("p", 1, [1.0, 1.0, 0.0, 0.0]), group("q", 1, [1.0, 0.0, 0.0, 0.0])], 1)
    groups = replay.join([group("p", 2, [0.0, 1.0, 0.0, 0.0]), group("q", 2, [0.0, 0.0, 0.0, 0.0])], 2)
    assert [len(g.rollouts) for g in groups] == [4, 5]  # p: one correct, untouched; q: all wrong, its one banked


def test_always_adds_to_every_group_with_banked_answers():
    replay = reuse(replay_per_group=2, when="always")
    replay.mix([group("p", 1, [1.0, 1.0, 1.0, 0.0]), group("q", 1, [1.0, 0.0, 0.0, 0.0])], 1)
    fresh = [group("p", 2, [1.0, 1.0, 1.0, 1.0]), group("q", 2, [0.0, 1.0, 0.0, 0.0]), group("r", 2, [0.0] * 4)]
    groups = replay.join(fresh, 2)
    assert [len(g.rollouts) for g in groups] == [6, 5, 4]  # M = 2, the one q has, nothing banked for r


def test_answers_of_the_same_step_are_never_replayed():
    replay = reuse(replay_per_group=2, when="always")
    replay.mix([group("p", 3, [1.0, 1.0, 0.0, 0.0])], 3)  # banked by step 3's mix
    assert replayed(replay.join([group("p", 3, [0.0] * 4, tag="b")], 3)) == []  # not in step 3 itself
    assert len(replayed(replay.join([group("p", 4, [0.0] * 4)], 4))) == 2  # from step 4 on


def test_max_per_prompt_keeps_the_newest():
    replay = reuse(replay_per_group=8, max_per_prompt=3, when="always")
    replay.mix([group("p", 1, [1.0, 1.0, 0.0])], 1)
    replay.mix([group("p", 2, [1.0, 1.0, 0.0])], 2)
    assert [e.rollout.response for e in replay.bank[("d", "p")]] == ["p@1#1", "p@2#0", "p@2#1"]  # p@1#0 left first
    assert replay.stats()["buffer_size"] == 3


def test_max_age_evicts_answers_too_long_in_the_bank():
    replay = reuse(replay_per_group=8, max_age=2, when="always")
    replay.mix([group("p", 1, [1.0, 0.0])], 1)
    replay.mix([group("p", 2, [1.0, 0.0])], 2)
    assert {r.response for r in replayed(replay.join([group("p", 3, [0.0, 0.0])], 3))} == {"p@1#0", "p@2#0"}
    # At step 4 the step-1 answer has been in the bank 3 steps (> 2): gone; the step-2 one (2 steps) stays.
    assert {r.response for r in replayed(replay.join([group("p", 4, [0.0, 0.0])], 4))} == {"p@2#0"}
    assert replay.stats()["age_mean"] == replay.stats()["age_max"] == 2.0


def test_replayed_answers_are_not_banked_again():
    # A replayed answer keeps its reward (correct), but `mix` banks fresh answers only: banking it again would
    # add a copy whose age starts over (banked_at = the replaying step).
    replay = reuse(replay_per_group=1)
    replay.mix([group("p", 1, [1.0, 0.0])], 1)  # p@1#0 banked at step 1
    replay.mix(replay.join([group("p", 3, [0.0, 0.0])], 3), 3)  # replayed at step 3, correct
    assert [(e.rollout.response, e.banked_at) for e in replay.bank[("d", "p")]] == [("p@1#0", 1)]
    replay.join([group("p", 5, [0.0, 0.0])], 5)
    assert replay.stats()["age_max"] == 4.0  # 5 - 1: its age counts from step 1, not from step 3


def test_a_seeded_bank_keeps_max_per_prompt_answers_the_last_ones():
    pool = {("d", "p"): [rollout("p", 0, 1.0, f"s{i}") for i in range(5)]}
    replay = ReuseReplay(ReuseReplayConfig(pool="x", max_per_prompt=2, replay_per_group=8), pool, seed=0)
    assert [e.rollout.response for e in replay.bank[("d", "p")]] == ["s3", "s4"]
    assert replay.stats()["buffer_size"] == 2
    assert {r.response for r in replayed(replay.join([group("p", 1, [0.0, 0.0])], 1))} == {"s3", "s4"}


def test_a_pool_seeds_the_bank_and_its_answers_are_rescored(tmp_path):
    pooled = rollout("p", 31, 1.0, "pooled")  # another run's answer, policy version 30
    replay = ReuseReplay(ReuseReplayConfig(pool="x", replay_per_group=2), {("d", "p"): [pooled]}, seed=0)
    (joined,) = replayed(replay.join([group("p", 1, [0.0, 0.0])], 1))  # available from step 1
    assert (joined.response, joined.reward, joined.correct) == ("pooled", None, None)  # the trainer verifies it
    assert replay.stats()["age_max"] == 1.0  # in the bank since step 0, not 30 versions in the future
    assert pooled.reward == 1.0  # the pool's own rollout untouched


def test_reuse_buffer_utilisation_counts_entries_ever_replayed():
    replay = reuse(replay_per_group=1)
    replay.mix([group("p", 1, [1.0, 1.0]), group("q", 1, [1.0, 0.0])], 1)  # 3 banked
    replay.join([group("q", 2, [0.0, 0.0])], 2)  # q's only answer drawn
    assert replay.stats()["buffer_utilisation"] == pytest.approx(1 / 3)
    assert replay.stats()["buffer_prompts"] == 2


# ---------------------------------------------------------------- refill


def test_refill_replaces_exactly_the_flat_groups_and_keeps_the_prompt_count():
    replay = RefillReplay(RefillReplayConfig(buffer_groups=8), seed=0)
    replay.mix([group("a", 1, [1.0, 0.0, 0.0, 0.0]), group("b", 1, [1.0, 1.0, 0.0, 0.0])], 1)
    fresh = [
        group("p", 2, [0.0] * 4),  # flat
        group("q", 2, [1.0, 0.0, 0.0, 0.0]),
        group("r", 2, [1.0] * 4),  # flat
    ]
    groups = replay.join(fresh, 2)
    assert len(groups) == 3 and groups[1] is fresh[1]
    assert sorted(g.problem_id for g in (groups[0], groups[2])) == ["a", "b"]  # both stored groups, distinct
    # Every answer of the two refilled slots is marked replayed (`replayed` keeps only those, so count them).
    assert replayed(groups) == [*groups[0].rollouts, *groups[2].rollouts] and len(replayed(groups)) == 8
    assert all(r.age(2) == 1 and r.advantage is None for r in replayed(groups))
    # Advantages recomputed over the replayed group's own rewards: [1, 0, 0, 0] -> mean 1/4, std 1/2.
    assert fill_advantages(groups, LossConfig()) == 0.0  # no flat group left
    a = next(g for g in groups if g.problem_id == "a")
    assert [r.advantage for r in a.rollouts] == pytest.approx([1.5, -0.5, -0.5, -0.5], abs=1e-5)


def test_refill_keeps_a_flat_group_when_the_buffer_runs_short_and_draws_only_earlier_steps():
    replay = RefillReplay(RefillReplayConfig(), seed=0)
    assert [g.problem_id for g in replay.join([group("p", 1, [0.0] * 2)], 1)] == ["p"]  # empty buffer
    replay.mix([group("a", 1, [1.0, 0.0])], 1)
    replay.mix([group("c", 2, [1.0, 0.0])], 2)  # stored by step 2 itself: not drawn at step 2
    groups = replay.join([group("p", 2, [0.0] * 2), group("q", 2, [0.0] * 2, tag="x")], 2)
    assert [g.problem_id for g in groups] == ["a", "q"]  # one earlier group for two flat slots


def test_refill_capacity_keeps_the_highest_variance_then_the_newest():
    replay = RefillReplay(RefillReplayConfig(buffer_groups=2), seed=0)
    replay.mix([group("low", 1, [1.0, 0.0, 0.0, 0.0])], 1)  # std 0.5
    replay.mix([group("high", 2, [1.0, 1.0, 0.0, 0.0])], 2)  # std 0.577
    replay.mix([group("low2", 3, [0.0, 0.0, 0.0, 1.0]), group("flat", 3, [1.0] * 4)], 3)  # std 0.5; flat: not stored
    assert [g.rollouts[0].problem_id for g in replay.buffer] == ["high", "low2"]  # the older of the tied 0.5 left


def test_refill_never_stores_a_flat_group():
    # With room for all three, only the non-flat group enters: a flat one (std 0) has no signal to replay.
    replay = RefillReplay(RefillReplayConfig(buffer_groups=8), seed=0)
    replay.mix([group("wrong", 1, [0.0] * 4), group("right", 1, [1.0] * 4), group("a", 1, [1.0, 0.0, 0.0, 0.0])], 1)
    assert [g.rollouts[0].problem_id for g in replay.buffer] == ["a"] and replay.stats()["buffer_size"] == 1
    assert replay.buffer[0].std == pytest.approx(0.5)  # [1, 0, 0, 0]: unbiased std 1/2


def test_refill_max_age_evicts_old_groups():
    replay = RefillReplay(RefillReplayConfig(max_age=1), seed=0)
    replay.mix([group("a", 1, [1.0, 0.0])], 1)
    assert [g.problem_id for g in replay.join([group("p", 2, [0.0, 0.0])], 2)] == ["a"]  # 1 step old
    assert [g.problem_id for g in replay.join([group("p", 3, [0.0, 0.0])], 3)] == ["p"]  # 2 steps: gone


def test_refill_draws_in_proportion_to_reward_std():
    replay = RefillReplay(RefillReplayConfig(), seed=0)
    replay.mix([group("wide", 1, [1.0, 0.0]), group("narrow", 1, [0.25, 0.0])], 1)  # std 0.7071 and 0.1768
    counts = {"wide": 0, "narrow": 0}
    for _ in range(4000):
        counts[replay.join([group("p", 2, [0.0, 0.0])], 2)[0].problem_id] += 1
    assert counts["wide"] / 4000 == pytest.approx(0.8, abs=0.03)  # 0.7071 / (0.7071 + 0.1768)


# ---------------------------------------------------------------- resume


@pytest.mark.parametrize(
    "config",
    [ReuseReplayConfig(replay_per_group=2, when="always", max_per_prompt=4), RefillReplayConfig(buffer_groups=6)],
    ids=lambda c: c.kind,
)
def test_state_round_trip_gives_the_same_selections(config):
    def history(replay):
        for step in (1, 2, 3):
            fresh = [group(f"p{i}", step, [float((i + j + step) % 3 == 0) for j in range(4)]) for i in range(4)]
            replay.mix(replay.join(fresh, step), step)

    def draws(replay):
        fresh = [group(f"p{i}", 4, [0.0] * 4) for i in range(4)]
        return [(r.problem_id, r.response) for r in replayed(replay.join(fresh, 4))]

    a = make_replay(config, seed=5)
    history(a)
    b = make_replay(config, seed=99)
    b.load_state_dict(a.state_dict())
    c = make_replay(config, seed=99)  # the same history without the state: the equality is not vacuous
    history(c)
    drawn_a, drawn_b, drawn_c = draws(a), draws(b), draws(c)
    assert drawn_a and drawn_a == drawn_b and drawn_c != drawn_a
    assert a.stats() == b.stats()


# ---------------------------------------------------------------- the metrics row


def test_the_step_row_reports_flat_groups_before_and_after_replay_and_the_replayed_rows():
    replay = RefillReplay(RefillReplayConfig(), seed=0)
    replay.mix([group("a", 1, [1.0, 0.0])], 1)
    replay.mix([group("b", 3, [1.0, 0.0])], 3)
    fresh = [group("p", 4, [0.0, 0.0]), group("q", 4, [0.0, 0.0]), group("r", 4, [1.0, 0.0])]
    groups = replay.join(fresh, 4)
    after = fill_advantages(groups, LossConfig())
    rollouts = replay.mix(groups, 4)
    arrival = SimpleNamespace(dropped=0, wait_seconds=0.0, idle_seconds=0.0, generate_seconds=0.0)
    train = {"optimizer_updates": 1, "tokens_trained": 12}
    row = step_row(4, fresh, groups, rollouts, after, train, PhaseTimer(), arrival, replay)
    assert row["zero_std_group_frac_fresh"] == pytest.approx(2 / 3) and row["zero_std_group_frac"] == 0.0
    assert row["replay_rows"] == 4 and row["replay_share"] == pytest.approx(4 / 6)
    assert (row["replay_age_mean"], row["replay_age_max"]) == (2.0, 3.0)  # versions 0 and 2 trained at step 4
    assert row["replay_buffer_size"] == 3.0  # a, b and this step's r
    assert row["replay_buffer_utilisation"] == pytest.approx(2 / 3)


# ---------------------------------------------------------------- registration, and the other designs' metrics


def test_the_command_line_and_the_plan_know_both_designs():
    import argparse

    from rlep.flows.options import add_model_flags, build_config, flag_overrides
    from rlep.tasks.rlep_order import rlep_order
    from rlep.tasks.settings.train import TrainConfig

    parser = argparse.ArgumentParser()
    add_model_flags(parser, TrainConfig)
    argv = ["--replay", "reuse", "--when", "always", "--max-per-prompt", "3", "--replay-per-group", "1"]
    replay = build_config(TrainConfig, None, flag_overrides(parser.parse_args(argv))).replay
    assert (replay.kind, replay.when, replay.max_per_prompt, replay.replay_per_group) == ("reuse", "always", 3, 1)
    argv = ["--replay", "refill", "--buffer-groups", "5", "--max-age", "2"]
    replay = build_config(TrainConfig, None, flag_overrides(parser.parse_args(argv))).replay
    assert (replay.kind, replay.buffer_groups, replay.max_age) == ("refill", 5, 2)
    helps = {a.option_strings[0]: a.help for a in parser._actions if a.option_strings}
    assert "[only for: reuse]" in helps["--when"] and "[only for: refill]" in helps["--buffer-groups"]
    # Neither needs a pool, so a study or pipeline plans no exploration or collection for them.
    arms = {
        name: TrainConfig.model_validate({"replay": replay})
        for name, replay in (
            ("baseline", {"kind": "none"}),
            ("reuse", {"kind": "reuse"}),
            ("refill", {"kind": "refill"}),
        )
    }
    order = rlep_order(arms, "baseline")
    assert order.pooled == () and not order.explores


def test_the_other_designs_report_buffer_size_and_utilisation():
    from rlep.tasks.replay.strategies import FIFOReplay, PrioritizedReplay, RLEPReplay
    from rlep.tasks.settings.replay import FIFOReplayConfig, NoReplayConfig, PrioritizedReplayConfig, RLEPReplayConfig

    assert all(math.isnan(v) for v in make_replay(NoReplayConfig()).stats().values())
    fifo = FIFOReplay(FIFOReplayConfig(buffer_size=100, batch_size=6, fresh_anchored=True), seed=0)
    fifo.mix([group("a", 1, [1.0, 0.0, 1.0, 0.0])], 1)  # 4 stored, none replayed yet
    assert (fifo.stats()["buffer_size"], fifo.stats()["buffer_utilisation"]) == (4, 0.0)
    fifo.mix([group("b", 2, [1.0, 0.0])], 2)  # 6 stored; the 2 fresh trained as fresh, 4 drawn from step 1
    assert fifo.stats()["buffer_utilisation"] == pytest.approx(4 / 6)
    prioritized = PrioritizedReplay(PrioritizedReplayConfig(replay_fraction=0.5, max_age=10), seed=0)
    prioritized.mix([group("a", 1, [1.0, 0.0, 1.0, 0.0])], 1)
    for r in prioritized.buffer:
        r.advantage = 1.0
    prioritized.mix([group("b", 2, [1.0, 1.0])], 2)  # 2 fresh -> 1 drawn of 4; the flat b group is not stored
    assert prioritized.stats()["buffer_utilisation"] == pytest.approx(1 / 4)
    pool = {("d", "p"): [rollout("p", 0, 1.0, f"a{i}") for i in range(4)]}
    rlep = RLEPReplay(RLEPReplayConfig(pool="x", replay_per_group=2), pool, seed=0)
    rlep.join([group("p", 1, [0.0])], 1)
    assert (rlep.stats()["buffer_size"], rlep.stats()["buffer_utilisation"]) == (4, 0.5)
