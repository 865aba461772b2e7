"""The unit replay works on (`Rollout`, grouped per prompt in a `Group`) and the strategy interface."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol


@dataclass
class Rollout:
    """One answer in a training batch, fresh or replayed.

    `advantage` is None until computed for its group; FIFO and prioritized replay bring rollouts whose
    advantage was computed when they were generated. `reward` / `correct` are None until verified (RLEP's
    replayed answers are re-scored by the current verifier). `behaviour_logprobs` are the log-probs of the
    policy that generated the answer (None when unknown, e.g. an imported pool).
    """

    problem_id: str
    data_source: str
    prompt: str
    gold_answer: str
    response: str
    response_token_ids: list[int]
    policy_version: int
    origin: Literal["fresh", "replay"] = "fresh"
    prompt_token_ids: list[int] = field(default_factory=list)
    behaviour_logprobs: list[float] | None = None
    reward: float | None = None
    correct: bool | None = None
    extracted_answer: str | None = None
    verdict_reason: str | None = None
    advantage: float | None = None
    finish_reason: str = "stop"
    sample_index: int = 0


@dataclass
class Group:
    """The answers to one prompt that share group statistics (GRPO's group).

    Replay-only groups (FIFO, prioritized) hold rollouts with stored advantages; `problem_id` is then the
    problem of their first rollout.
    """

    problem_id: str
    rollouts: list[Rollout]


class ReplayStrategy(Protocol):
    """Decides, per training step, which stored rollouts join the fresh ones.

    `select(fresh, step)` returns the step's training groups (the fresh groups, possibly extended, plus any
    replay-only groups); `add(fresh, step)` is called after advantages are known, to store what the
    strategy keeps. `state_dict` / `load_state_dict` make a run resumable.
    """

    name: str

    def select(self, fresh: list[Group], step: int) -> list[Group]: ...

    def add(self, fresh: list[Group], step: int) -> None: ...

    def stats(self) -> dict[str, float]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...
