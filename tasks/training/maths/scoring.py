"""Rewards of a step's answers: the sandboxed verifier's verdicts, the configured reward, and DAPO's soft overlong
penalty when it is set."""

from __future__ import annotations

import torch

from rlep.data.rollout import Rollout
from rlep.tasks.settings.train import TrainConfig
from rlep.tasks.training.maths.losses import overlong_penalty
from rlep.verifiers import rewards, verify_batch


def score_rollouts(rollouts: list[Rollout], config: TrainConfig) -> None:
    """Verify and reward `rollouts` in place (a step's fresh answers, and replayed ones when they are re-scored)."""
    if not rollouts:
        return
    verdicts = verify_batch([r.response for r in rollouts], [r.gold_answer for r in rollouts], config=config.verifier)
    values = rewards(verdicts, config.reward)
    loss = config.loss
    if loss.overlong_buffer:
        lengths = torch.tensor([len(r.response_token_ids) for r in rollouts])
        penalty = overlong_penalty(lengths, config.sampling.max_tokens, loss.overlong_buffer, loss.overlong_factor)
        values = (torch.tensor(values) + penalty).tolist()
    for r, verdict, value in zip(rollouts, verdicts, values):
        r.correct, r.extracted_answer, r.verdict_reason, r.reward = (
            verdict.correct,
            verdict.extracted,
            verdict.reason,
            value,
        )
