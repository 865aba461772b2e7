"""Group-relative advantages (GRPO, Shao et al. 2024, arXiv 2402.03300).

Each answer's advantage is its reward standardised within its group, the answers to one prompt:
A_i = (r_i - mean_g r) / (std_g r + eps). For RLEP the group is the G fresh answers plus the M replayed
ones (paper, Sec. 3), so replayed successes raise the group mean and push the failures further down.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


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
