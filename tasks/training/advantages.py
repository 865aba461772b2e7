"""Group-relative advantages (GRPO, Shao et al. 2024, arXiv 2402.03300).

Each answer's advantage is its reward standardised within its group, the answers to one prompt:
A_i = (r_i - mean_g r) / (std_g r + eps). For RLEP the group is the G fresh answers plus the M replayed
ones (paper, Sec. 3), so replayed successes raise the group mean and push the failures further down.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rlep.data.rollout import Group
from rlep.tasks.training.config import LossConfig


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


def fill_advantages(groups: list[Group], loss: LossConfig) -> float:
    """Advantages for every rollout without one, over its group's members (GRPO's, or AsymRE's r - V);
    returns the share of such groups whose rewards are all equal (no GRPO signal)."""
    pending = [(gi, r) for gi, g in enumerate(groups) for r in g.rollouts if r.advantage is None]
    if not pending:
        return 0.0
    rewards_t = torch.tensor([r.reward for _, r in pending], dtype=torch.float32)
    group_ids = [gi for gi, _ in pending]
    advantages, zero_var = group_advantages(rewards_t, group_ids, scale_by_std=loss.scale_advantages_by_std)
    if loss.objective.kind == "asymre":
        advantages = asymre_advantages(rewards_t, group_ids, loss.objective.delta_v)
    for (_, r), a in zip(pending, advantages.tolist()):
        r.advantage = a
    by_group: dict[int, bool] = {}
    for (gi, _), z in zip(pending, zero_var.tolist()):
        by_group[gi] = z
    return sum(by_group.values()) / len(by_group)
