"""Group-relative advantages (GRPO, Shao et al. 2024, arXiv 2402.03300).

Each answer's advantage is its reward standardised within its group, the answers to one prompt:
A_i = (r_i - mean_g r) / (std_g r + eps). For RLEP the group is the G fresh answers plus the M replayed
ones (paper, Sec. 3), so replayed successes raise the group mean and push the failures further down.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rlep.data.rollout import Group
from rlep.tasks.settings.train import LossConfig


def group_advantages(
    rewards: torch.Tensor, group_ids: Sequence[int] | torch.Tensor, eps: float = 1e-6, scale_by_std: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages [N] for rewards [N] whose group is `group_ids[i]`, and a bool [N] mask of zero-variance groups.

    std is the unbiased sample std (as in verl's GRPO). Groups of one answer, or whose rewards are all equal,
    get advantage 0: they carry no learning signal. `scale_by_std=False` gives Dr. GRPO's mean-centred form.
    """
    rewards = rewards.float()
    ids = torch.as_tensor(group_ids)
    advantages = torch.zeros_like(rewards)
    zero_var = torch.zeros(rewards.shape, dtype=torch.bool)
    for group in ids.unique():
        members = ids == group
        r = rewards[members]
        if r.numel() < 2 or bool((r == r[0]).all()):
            zero_var[members] = True
            continue
        centred = r - r.mean()
        advantages[members] = centred / (r.std() + eps) if scale_by_std else centred
    return advantages, zero_var


def asymre_advantages(
    rewards: torch.Tensor, group_ids: Sequence[int] | torch.Tensor, delta_v: float = -0.1
) -> torch.Tensor:
    """AsymRE advantages [N] = r - V with V = (mean reward of the answer's group) + delta_v.

    The group mean estimates the expected reward of the sampling policy on that prompt (V^mu); the paper
    (arXiv 2506.20520) proves policy improvement for V below V^mu and sees collapse at or above it, and uses
    a slightly negative shift. So an all-wrong group gets a small positive advantage -delta_v on every answer,
    and an all-right group 0 - delta_v as well: the positive side is favoured, as the paper intends.
    """
    rewards = rewards.float()
    ids = torch.as_tensor(group_ids)
    advantages = torch.zeros_like(rewards)
    for group in ids.unique():
        members = ids == group
        advantages[members] = rewards[members] - (rewards[members].mean() + delta_v)
    return advantages


def zero_variance_advantages(
    advantages: torch.Tensor, sign: torch.Tensor, entropy: torch.Tensor, mask: torch.Tensor, alpha: float
) -> torch.Tensor:
    """RL-ZVP's token advantages [B, T] (Le et al. 2025, arXiv 2509.21880, Eq. 5): rows of a flat group get
    entropy-shaped advantages, every other row its own advantage on each token.

    advantages, sign: [B] (`sign` +1: a correct answer of a flat group, -1: a wrong one, 0: any other row);
    entropy, mask: [B, T], `entropy` the policy's token entropy H_t over the vocabulary (no gradient flows through
    it). Correct: A_t = alpha * H_t, so confident tokens are reinforced least. Wrong:
    A_t = -alpha * (max_k H_k - H_t), the max over the row's own real tokens, so the most confident wrong token is
    pushed down most and the least confident not at all.

    As the paper: rows of groups with signal keep GRPO's advantage, flat groups are trained instead of filtered,
    the entropy is over the vocabulary and carries no gradient, under the clipped objective with clip-higher
    (ppo-clip only; with `is_correction` m2po, under M2PO's masked unclipped ratio instead).
    Departures: H_t is the entropy of the sampling distribution (logits / temperature) in each optimizer update's
    own forward, so with several updates a step it is the policy's as it moves (a single update: pi_old's); each
    answer's direction is its own verdict (`correct`): with the paper's binary reward a flat group's verdicts are
    all one, but with the overlong penalty a correct answer deep in the length band can score a wrong one's 0, and
    in such a flat group the correct answers are pushed up and the wrong ones down; designs that keep the
    advantages of generation (`fifo`) keep a stored rollout's mark too; alpha defaults to 0.1 and is not tuned here.
    """
    h = entropy.detach().float() * mask
    peak = h.masked_fill(~mask.bool(), float("-inf")).amax(-1, keepdim=True).clamp(min=0)
    out = advantages.float().unsqueeze(-1).expand_as(h).clone()
    s = sign.unsqueeze(-1).expand_as(h)
    out = torch.where(s > 0, alpha * h, out)
    out = torch.where(s < 0, -alpha * (peak - h), out)
    return out * mask


def fill_advantages(groups: list[Group], loss: LossConfig) -> float:
    """Advantages for every rollout without one, over its group's members (GRPO's, or AsymRE's r - V);
    returns the share of such groups whose rewards are all equal (no GRPO signal). With `loss.zero_variance`
    rl-zvp a flat group's rollouts are marked +1 (correct) or -1 (not), each by its own verdict, for RL-ZVP's token
    advantages, which need the policy's entropies and so are made in the update (`zero_variance_advantages`)."""
    pending = [(gi, r) for gi, g in enumerate(groups) for r in g.rollouts if r.advantage is None]
    if not pending:
        return 0.0
    rewards_t = torch.tensor([r.reward for _, r in pending], dtype=torch.float32)
    group_ids = [gi for gi, _ in pending]
    advantages, zero_var = group_advantages(rewards_t, group_ids, scale_by_std=loss.scale_advantages_by_std)
    if loss.objective.kind == "asymre":
        advantages = asymre_advantages(rewards_t, group_ids, loss.objective.delta_v)
    for (_, r), a, flat in zip(pending, advantages.tolist(), zero_var.tolist()):
        r.advantage = a  # a stored answer replayed into a new group loses its old group's mark
        r.zero_variance = (1 if r.correct else -1) if loss.zero_variance == "rl-zvp" and flat else 0
    by_group: dict[int, bool] = {}
    for (gi, _), z in zip(pending, zero_var.tolist()):
        by_group[gi] = z
    return sum(by_group.values()) / len(by_group)
