"""Turn a step's rollouts into padded tensors for the loss."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from rlep.data.rollout import Group, Rollout
from rlep.tasks.training.maths.logprobs import pad_sequences


@dataclass
class TrainingBatch:
    """B sequences of prompt + completion, right-padded to T tokens.

    input_ids, attention_mask: [B, T]. Per next-token position ([B, T-1]): `mask` (1 on completion tokens),
    `behaviour_logp` (the generating policy's log-probs, 0 where unknown). Per sequence ([B]): `advantages`,
    `is_replay`, `has_behaviour` (behaviour log-probs known), `age` (policy updates since generation),
    `group` (the index of the prompt group a row trains with, -1 for a row drawn on its own from a buffer),
    `shaping` (float: the beta of ExGRPO's policy shaping the row trains with, 0 = the run's objective),
    `zero_variance` (+1 / -1: a row of an all-correct / all-wrong flat group that trains with RL-ZVP's token
    advantages, 0 = its own advantage).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    mask: torch.Tensor
    behaviour_logp: torch.Tensor
    advantages: torch.Tensor
    is_replay: torch.Tensor
    has_behaviour: torch.Tensor
    age: torch.Tensor
    group: torch.Tensor
    shaping: torch.Tensor
    zero_variance: torch.Tensor

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def to(self, device: torch.device) -> TrainingBatch:
        """The same batch on `device` (the model's: the loss is computed where the model is)."""
        return TrainingBatch(**{name: getattr(self, name).to(device) for name in self.__dataclass_fields__})

    def select(self, index: torch.Tensor, width: int | None = None) -> TrainingBatch:
        """The rows `index` (a mini-batch), trimmed to their longest sequence: `width` tokens when the caller knows
        it (from `row_lengths` on the CPU: no wait on the device), else measured here."""
        width = int(self.attention_mask[index].sum(-1).max()) if width is None else width
        return TrainingBatch(
            input_ids=self.input_ids[index, :width],
            attention_mask=self.attention_mask[index, :width],
            mask=self.mask[index, : width - 1],
            behaviour_logp=self.behaviour_logp[index, : width - 1],
            advantages=self.advantages[index],
            is_replay=self.is_replay[index],
            has_behaviour=self.has_behaviour[index],
            age=self.age[index],
            group=self.group[index],
            shaping=self.shaping[index],
            zero_variance=self.zero_variance[index],
        )


def build_batch(
    rollouts: Sequence[Rollout], pad_id: int, step: int, groups: Sequence[int] | None = None
) -> TrainingBatch:
    """Tensors for `rollouts` (each with prompt/response token ids and an advantage); `groups[i]` is the prompt
    group of rollout i (-1: none), default none."""
    prompts = [r.prompt_token_ids for r in rollouts]
    completions = [r.response_token_ids for r in rollouts]
    input_ids, attention_mask, mask = pad_sequences(prompts, completions, pad_id)
    behaviour = torch.zeros_like(mask)
    has_behaviour = torch.zeros(len(rollouts), dtype=torch.bool)
    for row, r in enumerate(rollouts):
        if r.behaviour_logprobs is not None and len(r.behaviour_logprobs) == len(r.response_token_ids):
            start = len(r.prompt_token_ids) - 1
            behaviour[row, start : start + len(r.behaviour_logprobs)] = torch.tensor(r.behaviour_logprobs)
            has_behaviour[row] = True
    return TrainingBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        mask=mask,
        behaviour_logp=behaviour,
        advantages=torch.tensor([r.advantage for r in rollouts], dtype=torch.float32),
        is_replay=torch.tensor([r.origin == "replay" for r in rollouts]),
        has_behaviour=has_behaviour,
        age=torch.tensor([r.age(step) for r in rollouts], dtype=torch.float32),
        group=torch.tensor(list(groups) if groups is not None else [-1] * len(rollouts), dtype=torch.long),
        shaping=torch.tensor([r.shaping or 0.0 for r in rollouts], dtype=torch.float32),
        zero_variance=torch.tensor([r.zero_variance for r in rollouts], dtype=torch.float32),
    )


def group_ids(groups: Sequence[Group], rollouts: Sequence[Rollout], from_buffer: bool = False) -> list[int]:
    """The prompt group (index into `groups`) of each trained rollout, -1 for one that belongs to none (drawn on
    its own from a buffer), so mini-batches keep groups whole. A batch drawn rollout by rollout from a buffer
    (`from_buffer`, FIFO) has no groups: its draws are spread evenly."""
    if from_buffer:
        return [-1] * len(rollouts)
    member = {id(r): gi for gi, g in enumerate(groups) for r in g.rollouts}
    return [member.get(id(r), -1) for r in rollouts]


def mini_batches(group: torch.Tensor, count: int, generator: torch.Generator | None = None) -> list[torch.Tensor]:
    """Split B rows into exactly `count` mini-batches (sorted row indices each), one optimizer update each.

    Counted in prompts, as verl's `ppo_mini_batch_size`: rows of one prompt group (`group[i] >= 0`) stay
    together, the groups are dealt in turn (so each mini-batch gets the same number of groups when `count`
    divides them), then rows without a group (`-1`: drawn one by one from a buffer) go one at a time to the
    mini-batch with fewest rows. So the number of updates a step makes is fixed by configuration, never by
    how many rows replay adds. `generator` shuffles groups and rows first (None: batch order).
    """
    if count < 1:
        raise ValueError(f"mini-batch count must be >= 1, got {count}")
    ids = group.tolist()
    groups = sorted({g for g in ids if g >= 0})
    loose = [i for i, g in enumerate(ids) if g < 0]
    if len(groups) + len(loose) < count:
        raise ValueError(f"{len(groups)} groups and {len(loose)} single rows cannot fill {count} mini-batches")
    if generator is not None:
        groups = [groups[i] for i in torch.randperm(len(groups), generator=generator).tolist()]
        loose = [loose[i] for i in torch.randperm(len(loose), generator=generator).tolist()]
    members: dict[int, list[int]] = {}
    for i, g in enumerate(ids):
        if g >= 0:
            members.setdefault(g, []).append(i)
    bins: list[list[int]] = [[] for _ in range(count)]
    for n, g in enumerate(groups):
        bins[n % count].extend(members[g])
    for i in loose:
        min(bins, key=len).append(i)  # first of the smallest: deterministic
    return [torch.tensor(sorted(b), dtype=torch.long) for b in bins]


def row_lengths(batch: TrainingBatch) -> torch.Tensor:
    """Tokens (prompt + completion) of each row [B], on the CPU."""
    return batch.attention_mask.sum(-1).cpu()


def micro_batch_rows(rows: torch.Tensor, lengths: torch.Tensor, micro: int) -> list[torch.Tensor]:
    """`rows` (indices into a batch whose row lengths are `lengths`) in micro-batches of at most `micro`, longest
    first: sorted by length before they are cut, so each micro-batch holds rows of similar length and its padding
    (to its own longest row, `TrainingBatch.select`) is small. The rows a mini-batch trains on, its shares and so
    its step are those of any other cut; only which rows share a forward changes (and the float summation order).
    Ties keep the rows' order."""
    if len(rows) == 0:
        return []
    order = torch.sort(lengths[rows], descending=True, stable=True).indices
    return list(rows[order].split(micro))
