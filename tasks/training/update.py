"""One step's policy update: PPO-style epochs over mini-batches of a `TrainingBatch`."""

from __future__ import annotations

from collections import defaultdict

import torch

from tasks.logprobs import token_logprobs
from tasks.training.batch import TrainingBatch
from tasks.training.config import LossConfig
from tasks.training.losses import aggregate, clipped_policy_loss, kl_penalty, truncated_importance_weights


@torch.no_grad()
def _logprobs(model: torch.nn.Module, batch: TrainingBatch) -> torch.Tensor:
    logp, _ = token_logprobs(model, batch.input_ids, batch.attention_mask)
    return logp


def policy_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    batch: TrainingBatch,
    loss_config: LossConfig,
    grad_clip: float,
    ppo_epochs: int = 1,
    mini_batch_size: int | None = None,
    ref_model: torch.nn.Module | None = None,
    horizon: int | None = None,
    generator: torch.Generator | None = None,
) -> dict[str, float]:
    """Update `model` on `batch`; returns metrics averaged over optimizer steps.

    old log-probs (pi_old, the ratio's denominator) are the policy's before this update. With one epoch and
    one mini-batch they equal the first forward's log-probs, so that forward serves both (exact, one pass
    saved); otherwise a no-grad pass computes them first. Replayed sequences therefore start at ratio 1
    (RLEP's "recomputed by the current policy"); `is_correction=truncate` adds weights min(pi_old/mu, cap)
    against their stored behaviour log-probs mu.
    """
    size = len(batch)
    mini = mini_batch_size or size
    single_pass = ppo_epochs == 1 and mini >= size
    old_logp_all = None if single_pass else _logprobs(model, batch)
    sums: dict[str, float] = defaultdict(float)
    updates = 0
    model.train()
    for _ in range(ppo_epochs):
        order = torch.randperm(size, generator=generator) if mini < size else torch.arange(size)
        for start in range(0, size, mini):
            index = order[start : start + mini]
            mb = batch.select(index)
            logp, entropy = token_logprobs(model, mb.input_ids, mb.attention_mask)
            old_logp = logp.detach() if old_logp_all is None else old_logp_all[index, : logp.shape[1]]
            weights = None
            if loss_config.is_correction == "truncate":
                stale = (mb.is_replay & mb.has_behaviour).unsqueeze(-1)
                tis = truncated_importance_weights(old_logp, mb.behaviour_logp, loss_config.is_cap)
                weights = torch.where(stale, tis, torch.ones_like(tis))
            loss, metrics = clipped_policy_loss(
                logp, old_logp, mb.advantages, mb.mask,
                clip_low=loss_config.clip_low, clip_high=loss_config.clip_high, dual_clip=loss_config.dual_clip,
                aggregation=loss_config.aggregation, token_weights=weights, horizon=horizon,
            )  # fmt: skip
            kl_value = torch.zeros(())
            if ref_model is not None:
                ref_logp = _logprobs(ref_model, mb)
                kl_value = aggregate(kl_penalty(logp, ref_logp, loss_config.kl_estimator), mb.mask, loss_config.aggregation, horizon)
                loss = loss + loss_config.kl_coef * kl_value
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            optimizer.step()
            scheduler.step()
            updates += 1
            with torch.no_grad():
                n_tokens = mb.mask.sum().clamp(min=1)
                for name, value in metrics.items():
                    sums[name] += value
                sums["loss"] += loss.item()
                sums["kl"] += kl_value.item()
                sums["entropy"] += ((entropy * mb.mask).sum() / n_tokens).item()
                sums["grad_norm"] += grad_norm.item()
                sums.update(_behaviour_metrics(old_logp, mb, sums))
    model.eval()
    return {name: value / updates for name, value in sums.items()}


def _behaviour_metrics(old_logp: torch.Tensor, mb: TrainingBatch, sums: dict[str, float]) -> dict[str, float]:
    """Running sums of two health metrics (divided by the update count by the caller):
    `is_ratio_mean`: mean pi_old / mu over replayed tokens with known behaviour log-probs (1 when none);
    `logprob_mismatch`: mean |log pi_old - log mu| over fresh tokens, the engine-vs-trainer gap (vLLM's
    sampler against the torch model with the same weights), which should stay near 0."""
    tokens = mb.mask.bool()
    replay = (mb.is_replay & mb.has_behaviour).unsqueeze(-1) & tokens
    fresh = (~mb.is_replay & mb.has_behaviour).unsqueeze(-1) & tokens
    ratio = torch.exp(old_logp - mb.behaviour_logp)
    is_ratio = ratio[replay].mean().item() if replay.any() else 1.0
    mismatch = (old_logp - mb.behaviour_logp).abs()[fresh].mean().item() if fresh.any() else 0.0
    return {
        "is_ratio_mean": sums.get("is_ratio_mean", 0.0) + is_ratio,
        "logprob_mismatch": sums.get("logprob_mismatch", 0.0) + mismatch,
    }
