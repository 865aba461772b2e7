"""The in-memory form of a trajectory row in training (`Rollout`), grouped per prompt (`Group`).

A rollout is one answer in a training batch, fresh or replayed; its row form (data.trajectory) and the
conversions both ways live here, beside the schema, so training and every replay design read one record.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from rlep.data.problem import Problem
from rlep.data.trajectory import trajectory_row

PoolKey = tuple[str, str]  # (data_source, problem_id): ids are unique only within a source (they can be row numbers)


@dataclass
class Rollout:
    """One answer in a training batch, fresh or replayed.

    `advantage` is None until computed for its group; FIFO and prioritized replay bring rollouts whose
    advantage was computed when they were generated. `reward` / `correct` are None until verified (RLEP's
    replayed answers are re-scored by the current verifier). `behaviour_logprobs` are the log-probs of the
    policy that generated the answer (None when unknown, e.g. an imported pool). `shaping`: the beta of the policy
    shaping its tokens train with instead of the run's objective (ExGRPO's replayed trajectory,
    tasks/training/losses.PolicyShaping); None for every other row. `zero_variance`: +1 (-1) when the rollout's
    group was flat and all correct (all wrong) and it trains with RL-ZVP's entropy-shaped token advantages
    (`loss.zero_variance: rl-zvp`), 0 otherwise. Neither is written to the row form.
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
    sampling: dict[str, Any] | None = None  # the request that generated it (n, temperature, top_p, max_tokens, seed)
    shaping: float | None = None
    zero_variance: int = 0

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Rollout:
        """The rollout a trajectory row (data.trajectory schema) records, every field it has carried over.

        Rows carry no advantage. `origin` is the row's own; a file written before that column existed reads
        as "fresh". Empty log-probs (an imported pool) read as unknown (None).
        """
        logprobs = row.get("behaviour_logprobs")
        return cls(
            problem_id=row["problem_id"],
            data_source=row["data_source"],
            prompt=row["prompt"],
            gold_answer=row["gold_answer"],
            response=row["response"],
            response_token_ids=list(row.get("response_token_ids") or []),
            policy_version=int(row["policy_version"]),
            origin=row.get("origin") or "fresh",
            prompt_token_ids=list(row.get("prompt_token_ids") or []),
            behaviour_logprobs=list(logprobs) if logprobs else None,
            reward=row.get("reward"),
            correct=row.get("correct"),
            extracted_answer=row.get("extracted_answer"),
            verdict_reason=row.get("verdict_reason"),
            finish_reason=row.get("finish_reason") or "stop",
            sample_index=int(row.get("sample_index") or 0),
            sampling=json.loads(row["sampling"]) if row.get("sampling") else None,
        )

    def to_row(self, problem: Problem, *, run_id: str, model: str) -> dict[str, Any]:
        """This rollout as a trajectory row of `problem`, written by run `run_id` (`model`: the weights it
        trains). Unknown log-probs are written empty; an unscored rollout cannot be written."""
        if self.reward is None or self.correct is None:
            raise ValueError(
                f"rollout of problem {self.problem_id!r} sample {self.sample_index}: not scored, no row to write"
            )
        return trajectory_row(
            problem,
            self.prompt,
            response=self.response,
            response_token_ids=self.response_token_ids,
            behaviour_logprobs=self.behaviour_logprobs or [],
            finish_reason=self.finish_reason,
            correct=self.correct,
            extracted_answer=self.extracted_answer,
            verdict_reason=self.verdict_reason or "",
            reward=float(self.reward),
            run_id=run_id,
            policy_version=self.policy_version,
            model=model,
            sampling=self.sampling or {},
            sample_index=self.sample_index,
            prompt_token_ids=self.prompt_token_ids,
            origin=self.origin,
        )

    def age(self, step: int) -> int:
        """Policy updates between the weights that generated this rollout and those being trained at `step`
        (at step t the engine and the trainer start from version t-1)."""
        return (step - 1) - self.policy_version


@dataclass
class Group:
    """The answers to one prompt that share group statistics (GRPO's group).

    Replay-only groups (FIFO, prioritized) hold rollouts with stored advantages; `problem_id` is then the
    problem of their first rollout.
    """

    problem_id: str
    rollouts: list[Rollout]
