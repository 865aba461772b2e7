"""The loss maths on hand-computed cases."""

import math

import pytest
import torch

from rlep.tasks.training.maths.advantages import asymre_advantages, group_advantages
from rlep.tasks.training.maths.losses import (
    aggregate,
    asymre_loss,
    clipped_policy_loss,
    kl_penalty,
    overlong_penalty,
    truncated_importance_weights,
)


def test_group_advantages_over_g_plus_m():
    # One group of G=3 fresh answers (rewards 0, 0, 1) plus M=1 replayed success (1): stats over all four.
    rewards = torch.tensor([0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    groups = [0, 0, 0, 0, 1, 1]
    adv, zero_var = group_advantages(rewards, groups, eps=0.0)
    std = math.sqrt(((0.5**2) * 4) / 3)  # unbiased std of [0, 0, 1, 1]
    assert adv[:4].tolist() == pytest.approx([-0.5 / std, -0.5 / std, 0.5 / std, 0.5 / std])
    assert adv[4:].tolist() == [0.0, 0.0]
    assert zero_var.tolist() == [False] * 4 + [True, True]
    # Without the replayed success the same fresh answers get different advantages.
    adv_fresh, _ = group_advantages(torch.tensor([0.0, 0.0, 1.0]), [0, 0, 0], eps=0.0)
    assert adv_fresh[2] > adv[2]


def test_dr_grpo_form_only_centres():
    adv, _ = group_advantages(torch.tensor([0.0, 1.0, 1.0, 1.0]), [7, 7, 7, 7], scale_by_std=False)
    assert adv.tolist() == pytest.approx([-0.75, 0.25, 0.25, 0.25])


def test_aggregation_modes():
    values = torch.tensor([[1.0, 2.0, 3.0, 0.0], [4.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    assert aggregate(values, mask, "token-mean").item() == pytest.approx(10 / 4)
    assert aggregate(values, mask, "seq-mean-token-mean").item() == pytest.approx((2 + 4) / 2)
    assert aggregate(values, mask, "seq-mean-token-sum-norm", horizon=8).item() == pytest.approx((6 / 8 + 4 / 8) / 2)
    with pytest.raises(ValueError):
        aggregate(values, mask, "sum")


def _loss(ratio, adv, **kw):
    logp = torch.log(torch.tensor([[ratio]]))
    loss, metrics = clipped_policy_loss(logp, torch.zeros(1, 1), torch.tensor([adv]), torch.ones(1, 1), **kw)
    return loss.item(), metrics


@pytest.mark.parametrize(
    "ratio, adv, expected, low, high",
    [
        (1.0, 1.0, -1.0, 0, 0),  # on-policy: -A
        (1.5, 1.0, -1.28, 0, 1),  # positive advantage: clipped at 1 + clip_high
        (1.2, 1.0, -1.2, 0, 0),  # inside the band
        (0.5, -1.0, 0.8, 1, 0),  # negative advantage: clipped at 1 - clip_low
        (0.5, 1.0, -0.5, 0, 0),  # positive advantage, ratio below band: the unclipped (smaller) gain counts
        (3.0, -1.0, 3.0, 0, 0),  # negative advantage, large ratio: unclipped penalty
    ],
)
def test_clip_higher_cases(ratio, adv, expected, low, high):
    loss, metrics = _loss(ratio, adv, clip_low=0.2, clip_high=0.28, dual_clip=None)
    assert loss == pytest.approx(expected, abs=1e-6)
    assert (metrics["clip_frac_low"], metrics["clip_frac_high"]) == (low, high)


def test_dual_clip_bounds_negative_advantages():
    loss, metrics = _loss(20.0, -1.0, dual_clip=10.0)
    assert loss == pytest.approx(10.0) and metrics["dual_clip_frac"] == 1.0
    assert _loss(20.0, -1.0, dual_clip=None)[0] == pytest.approx(20.0)
    assert _loss(20.0, 1.0, dual_clip=10.0)[0] == pytest.approx(-1.28)  # positive advantages untouched


def test_gradient_is_zero_where_clipped():
    logp = torch.log(torch.tensor([[1.5, 1.0]])).requires_grad_()
    loss, _ = clipped_policy_loss(logp, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2), dual_clip=None)
    loss.backward()
    assert logp.grad[0, 0] == 0 and logp.grad[0, 1] != 0


def test_token_weights_scale_the_loss():
    logp = torch.zeros(1, 2)
    weights = torch.tensor([[2.0, 0.5]])
    loss, _ = clipped_policy_loss(logp, logp, torch.tensor([1.0]), torch.ones(1, 2), token_weights=weights)
    assert loss.item() == pytest.approx(-(2.0 + 0.5) / 2)


def test_kl_estimators():
    logp, ref = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -1.0]])
    assert kl_penalty(logp, ref, "k1")[0].tolist() == pytest.approx([0.5, -1.0])
    d = torch.tensor([[-0.5, 1.0]])
    assert kl_penalty(logp, ref, "k3")[0].tolist() == pytest.approx((torch.exp(d) - d - 1)[0].tolist())
    assert (kl_penalty(logp, ref, "k3") >= 0).all()
    assert kl_penalty(logp, logp, "k3").abs().max() == 0


def test_truncated_importance_weights():
    old = torch.log(torch.tensor([[0.5, 0.9, 0.1]]))
    behaviour = torch.log(torch.tensor([[0.5, 0.3, 0.4]]))
    assert truncated_importance_weights(old, behaviour, cap=2.0)[0].tolist() == pytest.approx([1.0, 2.0, 0.25])


def test_overlong_penalty():
    lengths = torch.tensor([10, 16, 18, 20, 25])
    assert overlong_penalty(lengths, max_tokens=20, buffer=4).tolist() == pytest.approx([0, 0, -0.5, -1.0, -1.0])
    assert overlong_penalty(lengths, max_tokens=20, buffer=0).tolist() == [0] * 5


def test_asymre_advantages_are_reward_minus_shifted_group_mean():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    adv = asymre_advantages(rewards, [0, 0, 0, 0, 1, 1], delta_v=-0.1)
    # group 0: mean 0.25, V = 0.15 -> 0.85, -0.15 x3; group 1 (all wrong): V = -0.1 -> +0.1 each
    assert adv.tolist() == pytest.approx([0.85, -0.15, -0.15, -0.15, 0.1, 0.1])
    assert asymre_advantages(rewards, [0, 0, 0, 0, 1, 1], delta_v=0.0)[4:].tolist() == [0.0, 0.0]


def test_asymre_loss_is_minus_advantage_times_logprob_without_ratio_or_clip():
    logp = torch.tensor([[-0.5, -1.0], [-2.0, 0.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    adv = torch.tensor([0.85, -0.15])
    loss, metrics = asymre_loss(logp, adv, mask, aggregation="token-mean")
    # tokens: -0.85*-0.5, -0.85*-1.0, 0.15*-2.0 -> (0.425 + 0.85 - 0.3) / 3
    assert loss.item() == pytest.approx((0.425 + 0.85 - 0.3) / 3)
    assert metrics["positive_token_frac"] == pytest.approx(2 / 3)
    loss.backward()
    # d loss / d logp = -A / n_tokens on real tokens, whatever the (absent) ratio would be
    assert logp.grad.flatten().tolist() == pytest.approx([-0.85 / 3, -0.85 / 3, 0.15 / 3, 0.0])


def test_the_objective_is_a_variant_with_its_own_settings(tmp_path):
    """`loss.objective` is one of two variants, each with only its own settings (the UI form and --help show
    the ones that apply); the flags keep their names; the layout of earlier versions still loads."""
    import argparse

    import pytest as _pytest

    from rlep.flows.options import ConfigError, add_model_flags, build_config, flag_overrides
    from rlep.tasks.settings.train import AsymREObjective, LossConfig, PPOClipObjective, TrainConfig

    parser = argparse.ArgumentParser()
    add_model_flags(parser, TrainConfig)

    def flags(*args):
        return build_config(TrainConfig, None, flag_overrides(parser.parse_args(list(args)))).loss.objective

    assert flags() == PPOClipObjective()
    assert flags("--clip-low", "0.1", "--dual-clip", "none") == PPOClipObjective(clip_low=0.1, dual_clip=None)
    assert flags("--objective", "asymre", "--asymre-delta-v", "-0.2") == AsymREObjective(delta_v=-0.2)
    with _pytest.raises(ConfigError, match=r"loss\.objective\.clip_low: not a setting of kind 'asymre'"):
        flags("--objective", "asymre", "--clip-low", "0.1")
    # A saved train_config.json or YAML of an earlier version: the kind by name, its settings beside it.
    earlier = {"objective": "asymre", "asymre_delta_v": -0.3, "clip_low": 0.2, "clip_high": 0.28, "dual_clip": 10.0}
    assert TrainConfig.model_validate({"loss": earlier}).loss.objective == AsymREObjective(delta_v=-0.3)
    earlier_ppo = {"clip_high": 0.3, "asymre_delta_v": -0.1}
    assert TrainConfig.model_validate({"loss": earlier_ppo}).loss.objective == PPOClipObjective(clip_high=0.3)
    path = tmp_path / "old.yaml"
    path.write_text("loss: {objective: asymre, asymre_delta_v: -0.25}\n")
    assert build_config(TrainConfig, path).loss.objective == AsymREObjective(delta_v=-0.25)
    assert LossConfig.model_validate_json(LossConfig(objective=AsymREObjective()).model_dump_json()) == LossConfig(
        objective=AsymREObjective()
    )
