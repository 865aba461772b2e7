"""M2PO's second-moment mask and RL-ZVP's zero-variance advantages: hand-computed cases, then through the real
update on the fixture model (the mechanism acts, and only where it should)."""

import copy
import math

import pytest
import torch
from transformers import AutoModelForCausalLM

from rlep.data.rollout import Group, Rollout
from rlep.tasks.settings.train import AsymREObjective, LossConfig
from rlep.tasks.training.loop.step_metrics import PhaseTimer, step_row
from rlep.tasks.training.loop.tracking import step_line
from rlep.tasks.training.maths.advantages import fill_advantages, zero_variance_advantages
from rlep.tasks.training.maths.batch import build_batch
from rlep.tasks.training.maths.logprobs import token_logprobs
from rlep.tasks.training.maths.losses import m2po_loss, m2po_mask
from rlep.tasks.training.maths.update import UpdateSettings, policy_update

# Two rows of four tokens: row 0 has A = +1, row 1 A = -1 and a padding token (log r -3 there must not count).
LOG_RATIO = torch.tensor([[0.1, 0.5, -0.2, 0.3], [-0.4, 0.2, -0.05, -3.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]])
ADV = torch.tensor([1.0, -1.0])


def test_m2po_mask_by_hand():
    # Trust-region tokens (A > 0 and log r > 0, or A < 0 and log r < 0): 0.1, 0.5, 0.3 of row 0 and -0.4, -0.05 of
    # row 1; their (log r)^2 = 0.01, 0.25, 0.09, 0.16, 0.0025, mean 0.5125 / 5 = 0.1025 > 0.04. Ascending, the running
    # means are 0.0025, 0.00625, 0.034167, 0.065625, 0.1025: the first three stay within 0.04, so 0.16 (row 1, token 0)
    # and 0.25 (row 0, token 1) are masked, 2 of the 7 real tokens, and M2 after is 0.1025 / 3.
    keep, metrics = m2po_mask(LOG_RATIO, ADV, MASK, threshold=0.04)
    assert keep.tolist() == [[True, False, True, True], [False, True, True, False]]
    assert metrics["m2po_m2"] == pytest.approx(0.1025)
    assert metrics["m2po_m2_kept"] == pytest.approx(0.1025 / 3)
    assert metrics["m2po_masked_frac"] == pytest.approx(2 / 7)


def test_m2po_masks_nothing_within_the_bound():
    keep, metrics = m2po_mask(LOG_RATIO, ADV, MASK, threshold=0.11)  # 0.1025 <= 0.11
    assert keep.tolist() == MASK.bool().tolist() and metrics["m2po_masked_frac"] == 0.0
    assert metrics["m2po_m2"] == metrics["m2po_m2_kept"] == pytest.approx(0.1025)


def test_m2po_loss_is_the_unclipped_ratio_on_kept_tokens_over_every_token():
    behaviour = torch.full_like(LOG_RATIO, -1.0)
    logp = (behaviour + LOG_RATIO).requires_grad_()
    value, metrics = m2po_loss(logp, behaviour, ADV, MASK, threshold=0.04)
    # Kept: row 0 tokens 0, 2, 3 (A = +1) and row 1 tokens 1, 2 (A = -1); divided by all 7 real tokens (footnote 2).
    expected = -(math.exp(0.1) + math.exp(-0.2) + math.exp(0.3) - math.exp(0.2) - math.exp(-0.05)) / 7
    assert value.item() == pytest.approx(expected, rel=1e-6)
    value.backward()
    grad = logp.grad
    assert grad[0, 1] == 0 and grad[1, 0] == 0 and grad[1, 3] == 0  # masked, masked, padding
    # No clip: row 0 token 3 (r = e^0.3 = 1.35, past PPO's 1 + 0.28) still has its gradient -A r / 7.
    assert grad[0, 3].item() == pytest.approx(-math.exp(0.3) / 7, rel=1e-6)
    assert metrics["m2po_masked_frac"] == pytest.approx(2 / 7)


def test_zero_variance_advantages_by_hand():
    entropy = torch.tensor([[0.5, 1.0, 0.2, 9.0], [0.3, 0.8, 0.1, 5.0], [0.4, 0.4, 0.4, 0.4]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    sign = torch.tensor([1.0, -1.0, 0.0])  # all-correct flat group, all-wrong flat group, a group with signal
    out = zero_variance_advantages(torch.tensor([0.0, 0.0, 0.7]), sign, entropy, mask, alpha=0.1)
    assert out[0].tolist() == pytest.approx([0.05, 0.1, 0.02, 0.0])  # alpha H_t
    # alpha (max H - H_t), the max over the row's real tokens (0.8), not the padding's 5.0
    assert out[1].tolist() == pytest.approx([-0.05, 0.0, -0.07, 0.0])
    assert out[2].tolist() == pytest.approx([0.7, 0.7, 0.0, 0.0])
    # The entropy is a weight, not a path for the gradient (the paper's stop-gradient).
    shaped = zero_variance_advantages(torch.zeros(3), sign, entropy.clone().requires_grad_(), mask, alpha=0.1)
    assert not shaped.requires_grad


def _rollout(pid, sample, correct, version=0, origin="fresh"):
    g = torch.Generator().manual_seed(hash((pid, sample)) % 1000)
    response = torch.randint(3, 40, (3 + sample % 3,), generator=g).tolist()
    return Rollout(
        problem_id=pid,
        data_source="d",
        prompt=pid,
        gold_answer="1",
        response=str(sample),
        response_token_ids=response,
        policy_version=version,
        origin=origin,
        prompt_token_ids=torch.randint(3, 40, (4,), generator=g).tolist(),
        behaviour_logprobs=(-torch.rand(len(response), generator=g) - 0.5).tolist(),
        reward=float(correct),
        correct=correct,
        sample_index=sample,
    )


def _groups():
    return [
        Group("right", [_rollout("right", j, True) for j in range(3)]),
        Group("wrong", [_rollout("wrong", j, False) for j in range(3)]),
        Group("mixed", [_rollout("mixed", j, j == 0) for j in range(3)]),
    ]


def test_fill_advantages_marks_flat_groups_for_rl_zvp_only():
    groups = _groups()
    flat = fill_advantages(groups, LossConfig(zero_variance="rl-zvp"))
    assert flat == pytest.approx(2 / 3)
    assert [[r.zero_variance for r in g.rollouts] for g in groups] == [[1, 1, 1], [-1, -1, -1], [0, 0, 0]]
    assert all(r.advantage == 0 for g in groups[:2] for r in g.rollouts)
    skip = _groups()
    fill_advantages(skip, LossConfig())
    assert all(r.zero_variance == 0 for g in skip for r in g.rollouts)
    # A stored answer replayed into a group with signal loses its old flat group's mark.
    again = groups[0].rollouts[0]
    again.advantage = None
    fill_advantages([Group("right", [again, _rollout("right", 5, False)])], LossConfig(zero_variance="rl-zvp"))
    assert again.zero_variance == 0 and again.advantage > 0
    # Each answer's own verdict sets its direction: a correct answer in the overlong band scores a wrong one's 0, so
    # the group is flat with mixed verdicts; the correct one is pushed up, the wrong ones down.
    overlong = [_rollout("band", j, j == 0) for j in range(3)]
    overlong[0].reward = 0.0  # 1 for the answer, -1 of overlong penalty
    fill_advantages([Group("band", overlong)], LossConfig(zero_variance="rl-zvp"))
    assert [r.zero_variance for r in overlong] == [1, -1, -1] and all(r.advantage == 0 for r in overlong)


def test_the_new_options_need_the_clipped_objective():
    with pytest.raises(ValueError, match="m2po: needs objective ppo-clip"):
        LossConfig(objective=AsymREObjective(), is_correction="m2po")
    with pytest.raises(ValueError, match="rl-zvp: needs objective ppo-clip"):
        LossConfig(objective=AsymREObjective(), zero_variance="rl-zvp")


@pytest.fixture(scope="module")
def base_model(fixture_model):
    return AutoModelForCausalLM.from_pretrained(fixture_model, dtype=torch.float32)


def _update(base, batch, loss, lr=0.5):
    """One SGD update of a copy of `base` on `batch`: its metrics and how it moved the weights (one flat vector)."""
    model = copy.deepcopy(base)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda n: 1.0)
    metrics = policy_update(model, opt, sched, batch, UpdateSettings(loss, grad_clip=1e9))
    return metrics, torch.cat([(a - b).detach().flatten() for a, b in zip(model.parameters(), base.parameters())])


def test_m2po_masks_stale_tokens_far_from_their_behaviour_policy(base_model):
    groups = _groups()
    fill_advantages(groups, LossConfig())
    rollouts = [r for g in groups for r in g.rollouts]
    batch = build_batch(rollouts, pad_id=0, step=1, groups=[gi for gi, g in enumerate(groups) for _ in g.rollouts])
    logp, _ = token_logprobs(base_model, batch.input_ids, batch.attention_mask)
    # The mixed group's answers were generated by an older policy (stale) whose log-probs were 2 lower a token, so
    # log(pi / mu) = 2 on each of their tokens: (log r)^2 = 4 > 0.04 on the trust-region ones (A > 0, r > 1), which
    # are masked; the correct answer's tokens are those (A > 0), the wrong ones (A < 0, r > 1) are not.
    stale = torch.tensor([g == 2 for g in batch.group.tolist()])
    batch.age = stale.float() * 3
    batch.behaviour_logp = torch.where(stale.unsqueeze(-1), (logp.detach() - 2.0) * batch.mask, batch.behaviour_logp)
    metrics, _ = _update(base_model, batch, LossConfig(is_correction="m2po"), lr=0.0)
    right_tokens = batch.mask[6].sum().item()  # the mixed group's correct answer is row 6
    assert metrics["m2po_masked_frac"] == pytest.approx(right_tokens / batch.mask.sum().item())
    assert metrics["m2po_m2"] > 0.04 and metrics["m2po_m2_kept"] <= 0.04
    # The update reads the configured bound: at tau_M2 = 5 the second moment (4) is within it, nothing is masked.
    metrics, _ = _update(base_model, batch, LossConfig(is_correction="m2po", m2po_threshold=5.0), lr=0.0)
    assert metrics["m2po_masked_frac"] == 0.0 and metrics["m2po_m2_kept"] == pytest.approx(metrics["m2po_m2"])
    # Fresh rows train against the trainer's own pi_old: nothing to mask when nothing is stale.
    batch.age = torch.zeros_like(batch.age)
    metrics, _ = _update(base_model, batch, LossConfig(is_correction="m2po"), lr=0.0)
    assert metrics["m2po_masked_frac"] == 0.0 and metrics["m2po_m2"] == 0.0


def test_rl_zvp_trains_on_flat_groups_that_grpo_skips(base_model):
    for zero_variance, should_move in (("skip", False), ("rl-zvp", True)):
        loss = LossConfig(zero_variance=zero_variance)
        _, moved = _update(base_model, _marked_batch(_groups()[:2], loss), loss)  # flat groups only: no GRPO signal
        assert (moved.abs().sum().item() > 1e-6) is should_move, zero_variance


def _marked_batch(groups, loss):
    fill_advantages(groups, loss)
    rollouts = [r for g in groups for r in g.rollouts]
    return build_batch(rollouts, pad_id=0, step=1, groups=[gi for gi, g in enumerate(groups) for _ in g.rollouts])


def test_rl_zvp_shapes_the_flat_rows_of_a_micro_batch_that_also_holds_rows_with_signal(base_model):
    # One micro-batch of a mixed group and two flat ones: the flat rows' entropy-shaped advantages still act.
    _, skip = _update(base_model, _marked_batch(_groups(), LossConfig()), LossConfig())
    zvp = LossConfig(zero_variance="rl-zvp")
    _, shaped = _update(base_model, _marked_batch(_groups(), zvp), zvp)
    assert (shaped - skip).abs().sum().item() > 1e-6


def test_rl_zvp_scales_with_its_alpha_through_the_update(base_model):
    # Flat groups only, one SGD step of the unclipped first update: the weights move in proportion to alpha.
    moves = {}
    for alpha in (0.1, 0.3):
        loss = LossConfig(zero_variance="rl-zvp", zvp_alpha=alpha)
        _, moves[alpha] = _update(base_model, _marked_batch(_groups()[:2], loss), loss)
    assert moves[0.1].abs().sum().item() > 1e-6
    # Compared as whole vectors: element by element, the nearly unmoved weights differ by float rounding (torch's
    # CPU reductions do not sum in a fixed order), far past any elementwise tolerance.
    assert (moves[0.3] - 3 * moves[0.1]).norm() <= 1e-3 * (3 * moves[0.1]).norm()


def test_the_step_row_and_line_report_the_new_metrics():
    groups = _groups()
    fill_advantages(groups, LossConfig(zero_variance="rl-zvp"))
    rollouts = [r for g in groups for r in g.rollouts]

    class _Arrival:
        dropped, wait_seconds, idle_seconds, generate_seconds = 0, 0.0, 0.0, 0.0

    class _Replay:
        needs = None

        def stats(self):
            return {"buffer_size": float("nan"), "buffer_utilisation": float("nan")}

    train = {"optimizer_updates": 1, "tokens_trained": 10, "m2po_masked_frac": 0.0006, "m2po_m2": 0.012}
    row = step_row(3, groups, groups, rollouts, 2 / 3, train, PhaseTimer(), _Arrival(), _Replay())
    assert row["zvp_group_frac"] == pytest.approx(2 / 3) and row["m2po_masked_frac"] == 0.0006
    line = step_line(row, 10)
    assert "rl-zvp 0.67 of groups" in line and "m2po masked 0.06% (M2 0.012)" in line
