"""Turn a step's rollouts into padded tensors for the loss."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from tasks.replay.base import Rollout
from tasks.training.logprobs import pad_sequences


@dataclass
class TrainingBatch:
    """B sequences of prompt + completion, right-padded to T tokens.

    input_ids, attention_mask: [B, T]. Per next-token position ([B, T-1]): `mask` (1 on completion tokens),
    `behaviour_logp` (the generating policy's log-probs, 0 where unknown). Per sequence ([B]): `advantages`,
    `is_replay`, `has_behaviour` (behaviour log-probs known), `age` (policy updates since generation).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    mask: torch.Tensor
    behaviour_logp: torch.Tensor
    advantages: torch.Tensor
    is_replay: torch.Tensor
    has_behaviour: torch.Tensor
    age: torch.Tensor

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def to(self, device: torch.device) -> TrainingBatch:
        """The same batch on `device` (the model's: the loss is computed where the model is)."""
        return TrainingBatch(**{name: getattr(self, name).to(device) for name in self.__dataclass_fields__})

    def select(self, index: torch.Tensor) -> TrainingBatch:
        """The rows `index` (a mini-batch), trimmed to their longest sequence."""
        width = int(self.attention_mask[index].sum(-1).max())
        return TrainingBatch(
            input_ids=self.input_ids[index, :width],
            attention_mask=self.attention_mask[index, :width],
            mask=self.mask[index, : width - 1],
            behaviour_logp=self.behaviour_logp[index, : width - 1],
            advantages=self.advantages[index],
            is_replay=self.is_replay[index],
            has_behaviour=self.has_behaviour[index],
            age=self.age[index],
        )


def build_batch(rollouts: Sequence[Rollout], pad_id: int, step: int) -> TrainingBatch:
    """Tensors for `rollouts` (each with prompt/response token ids and an advantage)."""
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
    )
