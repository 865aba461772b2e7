"""How a data-parallel update splits a step's batch over the ranks (`Sharding`: the `DataParallel` that
tasks/training/update.py's `policy_update` takes on each rank of tasks/training/distributed.py).

Every rank receives the step's whole batch (token ids, small next to the model), forms the same mini-batches as
one process would, and trains on its share of each mini-batch's prompt groups; the token-mean normaliser is the
mini-batch's global token count, known to every rank without a collective, and each rank's loss is scaled by the
world size because DDP and FSDP2 average gradients. Every rank runs the same number of micro-batches (padded with
fully masked rows): FSDP2 hangs otherwise. The no-grad old-log-prob pass is split the same way: each rank computes
its own rows, then they are summed over ranks (`Sharding.sum_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlep.tasks.training.collectives import all_reduce_sum, all_reduce_tensor


@dataclass(frozen=True)
class Sharding:
    """Which rows of a mini-batch a rank trains on, and how its loss is scaled.

    Whole prompt groups (`group >= 0`) are dealt to the ranks in turn, then rows without a group one at a
    time to the rank with fewest rows, so a group's members are never split. Every rank computes every rank's
    share (the batch is the same everywhere), so the micro-batch count is equalised without a collective.
    """

    rank: int
    world_size: int

    def rows(self, group: torch.Tensor, rank: int | None = None) -> torch.Tensor:
        """Sorted indices (into the mini-batch whose rows' groups are `group` [B]) of `rank`'s rows."""
        ids = group.tolist()
        bins: list[list[int]] = [[] for _ in range(self.world_size)]
        seen: dict[int, int] = {}
        for i, g in enumerate(ids):
            if g >= 0:
                if g not in seen:
                    seen[g] = len(seen) % self.world_size
                bins[seen[g]].append(i)
        for i, g in enumerate(ids):
            if g < 0:
                min(bins, key=len).append(i)
        return torch.tensor(sorted(bins[self.rank if rank is None else rank]), dtype=torch.long)

    def micro_batches(self, group: torch.Tensor, micro: int) -> int:
        """Micro-batches every rank runs on this mini-batch: the most any rank needs (at least one)."""
        return max(max(1, -(-len(self.rows(group, r)) // micro)) for r in range(self.world_size))

    def sync_gradients(self, model: torch.nn.Module, last: bool) -> None:
        """Before a micro-batch's forward: DDP all-reduces gradients in the last micro-batch's backward only
        (as its `no_sync`); FSDP2 reduce-scatters every backward, which keeps its unsharded gradients short-lived."""
        if hasattr(model, "require_backward_grad_sync"):
            model.require_backward_grad_sync = last

    @property
    def loss_scale(self) -> float:
        """DDP and FSDP2 average gradients over ranks; shares are of the global mini-batch, so scale back up."""
        return float(self.world_size)

    def all_reduce(self, values: list[float]) -> list[float]:
        """Element-wise sums over ranks (metrics' numerators and denominators), on the group's device."""
        return all_reduce_sum(values)

    def sum_rows(self, rows: torch.Tensor) -> torch.Tensor:
        """`rows` (zero outside this rank's rows) summed over ranks on the group's device: every rank's rows."""
        return all_reduce_tensor(rows)
