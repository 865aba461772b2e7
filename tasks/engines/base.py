"""The generation interface every engine implements, and the record one sampled answer becomes."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from rlep.tasks.settings.engine import SamplingConfig

if TYPE_CHECKING:  # torch is heavy to import; only the type is needed here
    import torch


class EngineUnavailable(RuntimeError):
    """The requested engine cannot run here (`vllm` asked for but not installed, a model split over more CPU workers
    than NUMA nodes)."""


@dataclass
class Completion:
    """One sampled answer.

    `logprobs[i]` is the log-probability of `token_ids[i]` under the distribution it was sampled from (the
    generating policy after temperature and top-p), i.e. the behaviour log-prob an importance ratio needs. Shape: both
    lists
    have length `len(token_ids)`. `finish_reason` is `stop` (end-of-sequence or a stop string) or `length`.
    """

    text: str
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    prompt_token_ids: list[int] = field(default_factory=list)


@runtime_checkable
class GenerationEngine(Protocol):
    """Samples answers for prompts from a policy whose weights can be replaced in place."""

    name: str

    def generate(
        self, prompts: Sequence[str], sampling: SamplingConfig, progress: bool = False
    ) -> list[list[Completion]]:
        """`sampling.n` completions for each prompt, in prompt order."""
        ...

    weight_dtype: torch.dtype  # the dtype it holds its weights in: what a weight sync sends

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Replace the policy weights (same architecture) without restarting the engine, from (HF name, tensor) pairs
        taken one at a time (a stream: tasks/training/generation/weight_sync.py; `state_dict.items()` works too)."""
        ...

    def close(self) -> None:
        """Release the engine's memory and processes."""
        ...
