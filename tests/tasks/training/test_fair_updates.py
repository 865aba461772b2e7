"""Fast, hand-computed guards for the rules a fair comparison rests on: every design makes the same number of
optimizer updates at the same settings; advantages over G + M; the replay buffers' age and priority rules;
the off-policy corrections and their cap; the configured loss aggregation reaching the update."""

import copy
import math

import pytest
import torch
from transformers import AutoModelForCausalLM

from rlep.data.problem import Problem
from rlep.data.rollout import Group, Rollout
from rlep.tasks.replay import make_replay
from rlep.tasks.replay.strategies import FIFOReplay, PrioritizedReplay, RLEPReplay
from rlep.tasks.settings.replay import (
    ExGRPOReplayConfig,
    FIFOReplayConfig,
    NoReplayConfig,
    PrioritizedReplayConfig,
    RefillReplayConfig,
    ReuseReplayConfig,
    RLEPReplayConfig,
)
from rlep.tasks.settings.train import LossConfig, PPOClipObjective, TrainConfig
from rlep.tasks.training.maths.advantages import fill_advantages
from rlep.tasks.training.maths.batch import build_batch, group_ids, mini_batches
from rlep.tasks.training.maths.logprobs import token_logprobs
from rlep.tasks.training.maths.losses import aggregate
from rlep.tasks.training.maths.update import UpdateSettings, off_policy_terms, policy_update

G, PROMPTS = 4, 8


def _rollout(pid, version, sample, reward, gen, origin="fresh"):
    response = torch.randint(3, 40, (2 + (sample * 3 + int(pid[1:])) % 5,), generator=gen).tolist()
    return Rollout(
        problem_id=pid,
        data_source="d",
        prompt=f"Q {pid}",
        gold_answer="1",
        response=f"{pid}-{version}-{sample}",
        response_token_ids=response,
        policy_version=version,
        origin=origin,
        prompt_token_ids=torch.randint(3, 40, (4,), generator=gen).tolist(),
        behaviour_logprobs=(-torch.rand(len(response), generator=gen) - 0.5).tolist(),
        reward=reward,
        correct=reward > 0,
        sample_index=sample,
    )


def _fresh(step, gen, planned=None):
    """The step's fresh groups: G answers to each of p0..p7, or as a design's `plan` asks (ExGRPO: G - 1 for the
    prompts it replays)."""
    planned = planned or [(Problem(f"p{i}", f"Q p{i}", "1", "d"), G) for i in range(PROMPTS)]
    return [
        Group(p.id, [_rollout(p.id, step - 1, j, float((int(p.id[1:]) + j) % 2), gen) for j in range(n)])
        for p, n in planned
    ]


def _strategy(kind):
    gen = torch.Generator().manual_seed(5)
    if kind == "rlep":
        pool = {("d", f"p{i}"): [_rollout(f"p{i}", -1, 9, 1.0, gen) for _ in range(3)] for i in range(0, PROMPTS, 2)}
        return RLEPReplay(RLEPReplayConfig(pool="x", replay_per_group=2, rescore=False), pool, seed=0)
    return make_replay(
        {
            "none": NoReplayConfig(),
            "fifo": FIFOReplayConfig(batch_size=PROMPTS * G, buffer_size=256),
            "prioritized": PrioritizedReplayConfig(replay_fraction=0.5),
            "reuse": ReuseReplayConfig(when="always"),
            "refill": RefillReplayConfig(),
            "exgrpo": ExGRPOReplayConfig(start_accuracy=0),
        }[kind],
        seed=0,
        policy=lambda prompt, answers: [float(len(a)) for a in answers],
    )


def _count_steps(optimizer):
    calls = []
    optimizer.register_step_post_hook(lambda *_: calls.append(1))
    return calls


@pytest.mark.parametrize("kind", ["none", "rlep", "fifo", "prioritized", "reuse", "refill", "exgrpo"])
def test_every_design_makes_the_same_number_of_updates(fixture_model, kind):
    # The same settings (8 prompts x 4 answers a step, 2 prompts per mini-batch, 2 epochs) for every design:
    # whatever replay adds, each step makes 2 x 8 / 2 = 8 optimizer updates, and the rows replay adds ride
    # inside the mini-batches.
    settings = dict(prompts_per_step=PROMPTS, samples_per_prompt=G, mini_batch_prompts=2, ppo_epochs=2)
    replay = {
        "none": {"kind": "none"},
        "rlep": {"kind": "rlep", "pool": "x"},
        "prioritized": {"kind": "prioritized"},
        "fifo": {"kind": "fifo", "batch_size": PROMPTS * G},
        "reuse": {"kind": "reuse"},
        "refill": {"kind": "refill"},
        "exgrpo": {"kind": "exgrpo"},
    }[kind]
    config = TrainConfig.model_validate({**settings, "replay": replay})
    assert config.updates_per_epoch() == 4
    model = AutoModelForCausalLM.from_pretrained(fixture_model, dtype=torch.float32)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    calls = _count_steps(optimizer)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda n: 1.0)
    strategy, gen = _strategy(kind), torch.Generator().manual_seed(0)
    sizes = []
    for step in (1, 2, 3):
        prompts = [Problem(f"p{i}", f"Q p{i}", "1", "d") for i in range(PROMPTS)]
        groups = strategy.join(_fresh(step, gen, strategy.plan(prompts, step, G)), step)
        fill_advantages(groups, LossConfig())
        rollouts = strategy.mix(groups, step)
        sizes.append(len(rollouts))
        batch = build_batch(rollouts, 0, step, group_ids(groups, rollouts, config.replay.batch_from_buffer))
        before = len(calls)
        metrics = policy_update(
            model,
            optimizer,
            scheduler,
            batch,
            UpdateSettings(
                config.loss,
                1.0,
                ppo_epochs=config.ppo_epochs,
                updates_per_epoch=config.updates_per_epoch(),
                micro_batch_size=7,
            ),
            generator=torch.Generator().manual_seed(step),
        )
        assert len(calls) - before == metrics["optimizer_updates"] == 8
        assert metrics["tokens_trained"] == 2 * int(batch.mask.sum())  # every token, once per epoch
    if kind == "exgrpo":  # replayed prompts in place of drawn ones: the batch keeps its size, and replays
        assert sizes == [PROMPTS * G] * 3 and strategy.stats()["buffer_utilisation"] > 0
    if kind in ("rlep", "prioritized"):
        assert max(sizes) > PROMPTS * G  # replay did add rows, and still no extra update


def test_mini_batches_keep_groups_whole_and_spread_single_rows():
    group = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 3, 3, -1, -1, -1, -1, -1])
    parts = mini_batches(group, 2, torch.Generator().manual_seed(0))
    assert len(parts) == 2 and sorted(torch.cat(parts).tolist()) == list(range(15))
    for part in parts:
        ids = group[part].tolist()
        assert len({g for g in ids if g >= 0}) == 2  # two whole groups each
        for g in {g for g in ids if g >= 0}:
            assert ids.count(g) == group.tolist().count(g)
    assert sorted(len(p) for p in parts) == [7, 8]  # single rows go to the smaller mini-batch
    assert [p.tolist() for p in mini_batches(torch.full((7,), -1), 3)] == [[0, 3, 6], [1, 4], [2, 5]]
    with pytest.raises(ValueError, match="cannot fill 3"):
        mini_batches(torch.tensor([0, 0, 1]), 3)


def test_mini_batch_prompts_must_divide_the_prompts():
    with pytest.raises(ValueError, match=r"mini_batch_prompts \(5\) must divide prompts_per_step \(32\)"):
        TrainConfig(prompts_per_step=32, mini_batch_prompts=5)
    assert TrainConfig(prompts_per_step=32, mini_batch_prompts=8).updates_per_epoch() == 4
    assert TrainConfig(prompts_per_step=3, mini_batch_prompts=8).updates_per_epoch() == 1
    assert TrainConfig(prompts_per_step=32, mini_batch_prompts=None).updates_per_epoch() == 1
    # FIFO in its own unit: 24 prompts generated, a batch of 256 rollouts = 32 prompts' worth of G = 8.
    fifo = TrainConfig.model_validate(
        {
            "prompts_per_step": 24,
            "samples_per_prompt": 8,
            "mini_batch_prompts": 8,
            "replay": {"kind": "fifo", "batch_size": 256},
        }
    )
    assert fifo.updates_per_epoch() == 4


@pytest.mark.parametrize(
    "prompts, g, rounded, suggestion",
    [
        (32, 8, 320, "320 or 384"),  # the defaults: 256 / 0.75 = 341.3 rows, 5.3 mini-batches of 64 -> 5
        (16, 16, 384, "256 or 384"),  # study-hard.yaml's first FIFO arm once: 341.3 rows, 2.7 mini-batches of 128 -> 3
    ],
)
def test_a_fifo_batch_splits_into_whole_mini_batches(prompts, g, rounded, suggestion):
    # 341 rows made 5 updates against the baseline's 4 (3 against 2 at G = 16) when rounded at the update, so a
    # batch the mini-batches do not divide is refused like a prompts_per_step mini_batch_prompts does not divide;
    # replay_ratio's own batch is rounded to whole mini-batches instead, so FIFO's defaults run (issue 45).
    settings = {"prompts_per_step": prompts, "samples_per_prompt": g, "replay": {"kind": "fifo", "replay_ratio": 0.25}}
    config = TrainConfig.model_validate(settings)
    assert config.replay.batch_size == rounded and config.updates_per_epoch() == rounded // (8 * g)
    assert TrainConfig.model_validate(config.model_dump()) == config  # the recorded batch reads back the same
    given = {**settings, "replay": {"kind": "fifo", "batch_size": 341}}  # a batch the user sets is checked, not changed
    with pytest.raises(ValueError, match=rf"FIFO's batch of 341 rollouts .* multiple of .*\({suggestion}\)"):
        TrainConfig.model_validate(given)
    dividing = {**settings, "prompts_per_step": prompts * 3 // 4, "replay": {"kind": "fifo", "batch_size": prompts * g}}
    assert (
        TrainConfig.model_validate(dividing).updates_per_epoch()
        == TrainConfig(prompts_per_step=prompts).updates_per_epoch()
    )
    small = {**settings, "prompts_per_step": 3, "samples_per_prompt": 4}  # 16 rows, under one mini-batch of 8 x 4
    assert TrainConfig.model_validate(small).updates_per_epoch() == 1


def test_rlep_advantages_are_over_fresh_and_replayed_members():
    gen = torch.Generator().manual_seed(0)
    fresh = [Group("p0", [_rollout("p0", 0, j, r, gen) for j, r in enumerate([0.0, 0.0, 1.0])])]
    pool = {("d", "p0"): [_rollout("p0", -1, 9, 1.0, gen), _rollout("p0", -1, 8, 1.0, gen)]}
    groups = RLEPReplay(RLEPReplayConfig(pool="x", replay_per_group=2, rescore=False), pool, seed=0).join(fresh, 1)
    fill_advantages(groups, LossConfig())
    # rewards [0, 0, 1 | 1, 1]: mean 0.6, sample std sqrt(0.3) -> (r - 0.6) / 0.5477
    expected = [(r - 0.6) / math.sqrt(0.3) for r in (0.0, 0.0, 1.0, 1.0, 1.0)]
    assert [r.advantage for r in groups[0].rollouts] == pytest.approx(expected, rel=1e-5)
    fresh_only = [Group("p0", [_rollout("p0", 0, j, r, gen) for j, r in enumerate([0.0, 0.0, 1.0])])]
    fill_advantages(fresh_only, LossConfig())
    assert fresh_only[0].rollouts[2].advantage == pytest.approx(2 / 3 / math.sqrt(1 / 3), rel=1e-5)  # not the same


def test_fifo_keeps_a_rollout_exactly_max_age_old():
    gen = torch.Generator().manual_seed(0)
    fifo = FIFOReplay(FIFOReplayConfig(buffer_size=100, batch_size=100, max_age=2), seed=0)
    fifo.mix([Group("p0", [_rollout("p0", 0, 0, 1.0, gen)])], step=1)  # generated by version 0
    fifo.mix([Group("p1", [_rollout("p1", 2, 0, 1.0, gen)])], step=3)  # at step 3 it is (3 - 1) - 0 = 2 old: kept
    assert [r.problem_id for r in fifo.buffer] == ["p0", "p1"]
    fifo.mix([Group("p2", [_rollout("p2", 3, 0, 1.0, gen)])], step=4)  # 3 old: evicted
    assert [r.problem_id for r in fifo.buffer] == ["p1", "p2"]


def test_prioritized_priorities_follow_the_exponent():
    gen = torch.Generator().manual_seed(0)
    replay = PrioritizedReplay(PrioritizedReplayConfig(priority_alpha=2.0, priority_eps=0.5), seed=0)
    replay.buffer = [_rollout("p0", 0, j, 1.0, gen) for j in range(3)]
    for r, a in zip(replay.buffer, (1.0, -2.5, 0.0)):
        r.advantage = a
    assert replay.priorities(step=1).tolist() == pytest.approx([1.5**2, 3.0**2, 0.5**2])


def _part(old, behaviour, is_replay, age):
    old_t = torch.tensor(old).log()
    row = _rollout("p0", 0, 0, 1.0, torch.Generator().manual_seed(0))
    row.advantage = 1.0
    batch = build_batch([row] * len(old), 0, 1)
    batch.is_replay = torch.tensor(is_replay)
    batch.age = torch.tensor(age, dtype=torch.float32)
    batch.has_behaviour = torch.ones(len(old), dtype=torch.bool)
    batch.behaviour_logp = torch.tensor(behaviour).log()
    return old_t, batch


def test_truncated_importance_weights_use_the_configured_cap_on_stale_rows_only():
    # Probabilities: pi_old / mu = 0.9 / 0.3 = 3 (capped at 1.5), 0.2 / 0.4 = 0.5, and a fresh row (weight 1).
    old, part = _part([[0.9, 0.2], [0.9, 0.2]], [[0.3, 0.4], [0.3, 0.4]], [True, False], [0, 0])
    base, weights = off_policy_terms(old, part, LossConfig(is_correction="truncate", is_cap=1.5))
    assert torch.equal(base, old)
    torch.testing.assert_close(weights, torch.tensor([[1.5, 0.5], [1.0, 1.0]]))
    _, weights = off_policy_terms(old, part, LossConfig(is_correction="truncate", is_cap=4.0))
    assert weights[0].tolist() == pytest.approx([3.0, 0.5])
    # A fresh rollout generated by an older policy (async) is stale as well.
    old, part = _part([[0.9, 0.2]], [[0.3, 0.4]], [False], [1])
    torch.testing.assert_close(
        off_policy_terms(old, part, LossConfig(is_correction="truncate", is_cap=1.5))[1], torch.tensor([[1.5, 0.5]])
    )
    assert off_policy_terms(old, part, LossConfig())[1] is None


def test_behaviour_correction_clips_against_the_generating_policy():
    old, part = _part([[0.9, 0.2], [0.9, 0.2]], [[0.3, 0.4], [0.3, 0.4]], [True, False], [0, 0])
    base, weights = off_policy_terms(old, part, LossConfig(is_correction="behaviour"))
    assert weights is None
    torch.testing.assert_close(
        base.exp(), torch.tensor([[0.3, 0.4], [0.9, 0.2]])
    )  # mu for the stale row, pi_old for the fresh


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_the_configured_aggregation_reaches_the_update(fixture_model, aggregation):
    # One SGD step through policy_update equals -lr x the gradient of the hand-written surrogate under the
    # configured aggregation (ratio 1 at the first update: the loss's gradient is that of -A log pi).
    gen = torch.Generator().manual_seed(0)
    rollouts = [_rollout(f"p{i}", 0, i, 1.0, gen) for i in range(5)]
    for i, r in enumerate(rollouts):
        r.advantage = [1.0, -0.5, 2.0, 0.3, -1.2][i]
    batch = build_batch(rollouts, 0, 1)
    model = AutoModelForCausalLM.from_pretrained(fixture_model, dtype=torch.float32)
    manual = copy.deepcopy(model)
    logp, _ = token_logprobs(manual, batch.input_ids, batch.attention_mask)
    aggregate(-batch.advantages.unsqueeze(-1) * logp, batch.mask, aggregation, horizon=12).backward()
    updated = copy.deepcopy(model)
    opt = torch.optim.SGD(updated.parameters(), lr=1.0)
    policy_update(
        updated,
        opt,
        torch.optim.lr_scheduler.LambdaLR(opt, lambda n: 1.0),
        batch,
        UpdateSettings(
            LossConfig(aggregation=aggregation, objective=PPOClipObjective(dual_clip=None)), grad_clip=1e9, horizon=12
        ),
    )
    for p0, p1, pm in zip(model.parameters(), updated.parameters(), manual.parameters()):
        torch.testing.assert_close((p0 - p1).detach(), pm.grad, rtol=1e-4, atol=1e-7)


def test_token_mean_over_fresh_never_divides_by_one(fixture_model):
    # FIFO's uniform draw can give a mini-batch with no fresh token: its denominator is the step's fresh tokens
    # per update, not 1 (which would turn the loss into a raw token sum).
    gen = torch.Generator().manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(fixture_model, dtype=torch.float32)
    rows = [_rollout(f"p{i}", 0, i, 1.0, gen, origin="replay") for i in range(2)] + [_rollout("p9", 0, 0, 1.0, gen)]
    for r in rows:
        r.advantage = 1.0
    replay_only = build_batch(rows, 0, 1, groups=[0, 0, 1])  # rows 0-1 (replayed) together, row 2 (fresh) alone
    fresh_tokens = int((replay_only.mask[2]).sum())
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    m = policy_update(
        model,
        opt,
        torch.optim.lr_scheduler.LambdaLR(opt, lambda n: 1.0),
        replay_only,
        UpdateSettings(LossConfig(token_mean_over="fresh"), grad_clip=1e9, updates_per_epoch=2),
    )
    replay_tokens = int(replay_only.mask[:2].sum())
    # The replayed mini-batch's loss is its token sum / (fresh tokens / 2 updates), never / 1: its mean
    # per-token loss is -1 (A = 1, ratio 1), so the scaled loss is -replay_tokens / (fresh_tokens / 2).
    expected_replay = -replay_tokens / (fresh_tokens / 2)
    assert m["loss"] == pytest.approx((expected_replay + -1.0) / 2, rel=1e-5)


def test_is_capped_frac_is_absent_without_truncation_and_nan_without_stale_tokens(fixture_model):
    # 0.0 read as "the cap never binds" where no correction ran at all: absent without truncated IS, NaN in a
    # step with no stale token to weight, a share where there were some.
    gen = torch.Generator().manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(fixture_model, dtype=torch.float32)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)

    def update(origin, loss):
        rows = [_rollout(f"p{i}", 0, i, 1.0, gen, origin=origin) for i in range(3)]
        for r in rows:
            r.advantage = 1.0
        batch, settings = build_batch(rows, 0, 1), UpdateSettings(loss, 1e9)
        return policy_update(model, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda n: 1.0), batch, settings)

    truncate = LossConfig(is_correction="truncate", is_cap=1.5)
    assert "is_capped_frac" not in update("replay", LossConfig())
    assert math.isnan(update("fresh", truncate)["is_capped_frac"])
    assert 0.0 <= update("replay", truncate)["is_capped_frac"] <= 1.0
