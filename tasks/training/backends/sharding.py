"""How a data-parallel update splits a step's batch over the ranks (`Sharding`: the `DataParallel` that
tasks/training/maths/update.py's `policy_update` takes on each rank of tasks/training/backends/distributed.py).

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

from rlep.tasks.training.backends.collectives import all_reduce_sum, all_reduce_tensor


def deal_by_load(sizes: list[int], loads: list[float], world_size: int) -> list[list[int]]:
    """Deal units (whole prompt groups, or single rows) to `world_size` ranks so that each rank's load is near the
    mean: heaviest first, each onto the least-loaded rank that has room for its `sizes[u]` rows (at most
    ceil(total rows / world_size) a rank, so the ranks' micro-batch counts stay as even as dealing by count keeps
    them), or onto the least-loaded rank when none has room. Returns each rank's unit indices, ascending.

    `loads[u]` is what a unit costs to train (its rows' tokens): greedy longest-processing-time scheduling, whose
    largest rank load is within 4/3 of the best possible (Graham 1969). Deterministic (ties: the earlier unit, the
    lower rank), so every rank computes the same deal without a collective."""
    if len(sizes) != len(loads):
        raise ValueError(f"{len(sizes)} unit sizes but {len(loads)} loads")
    room = -(-sum(sizes) // world_size)
    rows, load = [0] * world_size, [0.0] * world_size
    dealt: list[list[int]] = [[] for _ in range(world_size)]
    for unit in sorted(range(len(sizes)), key=lambda u: (-loads[u], u)):
        fits = [r for r in range(world_size) if rows[r] + sizes[unit] <= room] or list(range(world_size))
        rank = min(fits, key=lambda r: (load[r], r))
        dealt[rank].append(unit)
        rows[rank] += sizes[unit]
        load[rank] += loads[unit]
    return [sorted(units) for units in dealt]


@dataclass(frozen=True)
class Sharding:
    """Which rows of a mini-batch a rank trains on, and how its loss is scaled.

    Whole prompt groups (`group >= 0`) and rows without a group (each a unit of its own) are dealt by tokens
    (`deal_by_load`): each rank gets about the same number of tokens to train on, not the same number of groups,
    and a group's members are never split. Every rank computes every rank's share (the batch is the same
    everywhere), so the micro-batch count is equalised without a collective.
    """

    rank: int
    world_size: int

    def rows(self, group: torch.Tensor, lengths: torch.Tensor | None = None, rank: int | None = None) -> torch.Tensor:
        """Sorted indices (into the mini-batch whose rows' groups are `group` [B] and token counts `lengths` [B],
        both on the CPU; None: every row alike) of `rank`'s rows."""
        ids = group.tolist()
        tokens = [1] * len(ids) if lengths is None else lengths.tolist()
        units: dict[int, list[int]] = {}  # a group's rows, or a loose row alone (keyed by -1 - its index)
        for i, g in enumerate(ids):
            units.setdefault(g if g >= 0 else -1 - i, []).append(i)
        members = list(units.values())
        dealt = deal_by_load([len(m) for m in members], [sum(tokens[i] for i in m) for m in members], self.world_size)
        mine = dealt[self.rank if rank is None else rank]
        return torch.tensor(sorted(i for unit in mine for i in members[unit]), dtype=torch.long)

    def micro_batches(self, group: torch.Tensor, micro: int, lengths: torch.Tensor | None = None) -> int:
        """Micro-batches every rank runs on this mini-batch: the most any rank needs (at least one)."""
        return max(max(1, -(-len(self.rows(group, lengths, r)) // micro)) for r in range(self.world_size))

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
