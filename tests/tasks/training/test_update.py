"""policy_update on a real (fixture) model: micro-batch accumulation gives the same step as one pass; several
updates per step make the clip act; the fresh-token denominator; the AsymRE objective."""

import copy
import math

import pytest
import torch
from conftest import update_rollout
from transformers import AutoModelForCausalLM

from rlep.tasks.settings.train import AsymREObjective, LossConfig
from rlep.tasks.training.maths.batch import build_batch
from rlep.tasks.training.maths.logprobs import token_logprobs
from rlep.tasks.training.maths.update import UpdateSettings, policy_update


def _batch(n=7):
    g = torch.Generator().manual_seed(0)
    rollouts = []
    for i in range(n):
        prompt = torch.randint(3, 40, (5 + i % 3,), generator=g).tolist()
        response = torch.randint(3, 40, (2 + (i * 5) % 7,), generator=g).tolist()
        rollouts.append(update_rollout(i, prompt, response, g))
    return build_batch(rollouts, pad_id=0, step=1)


def _step(model, batch, loss, micro, ref=None, epochs=1, updates=1, lr=0.1):
    model = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda n: 1.0)
    metrics = policy_update(
        model,
        opt,
        sched,
        batch,
        UpdateSettings(
            loss, grad_clip=1e9, ppo_epochs=epochs, updates_per_epoch=updates, micro_batch_size=micro, horizon=12
        ),
        ref_model=ref,
        generator=torch.Generator().manual_seed(1),
    )
    return model, metrics


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_micro_batches_give_the_same_update(fixture_model, aggregation):
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(fixture_model, dtype=torch.float32)
    ref = copy.deepcopy(base).eval()
    with torch.no_grad():  # a policy that differs from the reference, so KL and ratios are not trivial
        for p in base.parameters():
            p.add_(0.01 * torch.randn_like(p))
    batch = _batch()
    loss = LossConfig(aggregation=aggregation, kl_coef=0.5, is_correction="truncate")
    for kwargs in ({}, {"epochs": 2, "updates": 2}):
        whole, m_whole = _step(base, batch, loss, micro=None, ref=ref, **kwargs)
        split, m_split = _step(base, batch, loss, micro=2, ref=ref, **kwargs)
        moved = sum((a - b).abs().sum() for a, b in zip(whole.parameters(), base.parameters()))
        assert moved > 1e-3  # the step did something
        for a, b in zip(whole.parameters(), split.parameters()):
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)  # float summation order differs
        for name in ("loss", "kl", "entropy", "clip_frac_low", "ratio_mean", "is_ratio_mean", "logprob_mismatch"):
            assert m_split[name] == pytest.approx(m_whole[name], rel=1e-3, abs=1e-5), name


@pytest.fixture(scope="module")
def base_model(fixture_model):
    return AutoModelForCausalLM.from_pretrained(fixture_model, dtype=torch.float32)


def test_one_update_per_step_never_clips_and_several_do(base_model):
    batch = _batch(16)
    loss = LossConfig()
    _, single = _step(base_model, batch, loss, micro=None, lr=2.0)
    assert single["ratio_mean"] == pytest.approx(1.0) and single["clip_frac_low"] == single["clip_frac_high"] == 0
    _, several = _step(base_model, batch, loss, micro=None, updates=4, lr=2.0)  # 4 updates against fixed old log-probs
    assert several["clip_frac_low"] + several["clip_frac_high"] > 0
    assert several["ratio_mean"] != pytest.approx(1.0, abs=1e-4)


def test_token_mean_over_fresh_tokens_scales_the_step_by_the_fresh_share(base_model):
    batch = _batch()
    over_all, m_all = _step(base_model, batch, LossConfig(), micro=None, lr=1.0)
    over_fresh, m_fresh = _step(base_model, batch, LossConfig(token_mean_over="fresh"), micro=2, lr=1.0)
    tokens, fresh_tokens = batch.mask.sum(), (batch.mask * (~batch.is_replay).unsqueeze(-1)).sum()
    assert fresh_tokens < tokens
    # One plain SGD step (-lr x gradient): the same direction, longer by tokens / fresh tokens.
    scale = (tokens / fresh_tokens).item()
    for a, b, p in zip(over_all.parameters(), over_fresh.parameters(), base_model.parameters()):
        torch.testing.assert_close((b - p).detach(), scale * (a - p).detach(), rtol=2e-3, atol=1e-6)
    assert m_fresh["loss"] == pytest.approx(scale * m_all["loss"], rel=1e-4)
    assert m_fresh["entropy"] == pytest.approx(m_all["entropy"], rel=1e-4)  # metrics keep their token weights


def test_asymre_objective_ignores_the_ratio(base_model):
    batch = _batch()
    loss = LossConfig(objective=AsymREObjective())
    model, metrics = _step(base_model, batch, loss, micro=3, updates=2, epochs=2)
    assert "clip_frac_low" not in metrics and 0 < metrics["positive_token_frac"] < 1
    assert any(not torch.equal(a, b) for a, b in zip(model.parameters(), base_model.parameters()))


def test_a_batch_moves_whole_to_the_model_device():
    # The update moves each step's batch (built on the CPU) to the model's device; every field must follow
    # (no GPU here: the meta device stands in for one).
    batch = _batch().to(torch.device("meta"))
    assert {getattr(batch, name).device.type for name in batch.__dataclass_fields__} == {"meta"}


def test_policy_shaping_weighs_against_the_stored_behaviour_log_probs(base_model):
    # ExGRPO's w = pi / mu, mu the log-probs stored with the replayed trajectory. With mu = pi / 2 on the shaped row,
    # w = 2 on each of its tokens, on the first update too; w against the trainer's pi_old (= pi in a single pass)
    # would be 1.
    batch = _batch(3)
    logp, _ = token_logprobs(base_model, batch.input_ids, batch.attention_mask)
    batch.behaviour_logp = (logp.detach() - math.log(2)) * batch.mask
    batch.shaping = torch.tensor([0.1, 0.0, 0.0])
    _, metrics = _step(base_model, batch, LossConfig(), micro=None, lr=0.0)
    assert metrics["shaped_ratio_mean"] == pytest.approx(2.0, rel=1e-4)
    assert metrics["shaped_token_frac"] == pytest.approx((batch.mask[0].sum() / batch.mask.sum()).item())


def test_is_capped_frac_averages_over_the_updates_with_stale_tokens_only(base_model):
    # Two updates: a mini-batch of two replayed rows whose behaviour log-probs (-30 a token) are far below the
    # policy's, so every weight pi_old / mu is over the cap (share 1), and one of two fresh rows (no stale token:
    # NaN). The step reports 1, the mean over the update that measured it; counting the NaN update as 0 gives 0.5.
    batch = _batch(4)
    batch.is_replay = torch.tensor([True, True, False, False])
    batch.group = torch.tensor([0, 0, 1, 1])
    batch.behaviour_logp = torch.where(batch.is_replay.unsqueeze(-1), -30.0 * batch.mask, batch.behaviour_logp)
    truncate = LossConfig(is_correction="truncate", is_cap=1.5)
    _, metrics = _step(base_model, batch, truncate, micro=None, updates=2, lr=0.0)
    assert metrics["optimizer_updates"] == 2 and metrics["is_capped_frac"] == 1.0
