"""One step's policy update: PPO-style epochs over mini-batches of a `TrainingBatch`."""

from __future__ import annotations

from collections import defaultdict

import torch

from tasks.logprobs import token_logprobs
from tasks.training.batch import TrainingBatch
from tasks.training.config import LossConfig
from tasks.training.losses import aggregate, clipped_policy_loss, kl_penalty, truncated_importance_weights


@torch.no_grad()
def _logprobs(model: torch.nn.Module, batch: TrainingBatch, micro: int) -> torch.Tensor:
    """Log-probs [B, T-1] of `batch` under `model`, computed `micro` sequences at a time."""
    out = torch.zeros_like(batch.behaviour_logp)
    for rows in _chunks(len(batch), micro):
        part = batch.select(rows)
        logp, _ = token_logprobs(model, part.input_ids, part.attention_mask)
        out[rows, : logp.shape[1]] = logp
    return out


def _chunks(size: int, chunk: int) -> list[torch.Tensor]:
    return [torch.arange(start, min(size, start + chunk)) for start in range(0, size, chunk)]


def policy_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    batch: TrainingBatch,
    loss_config: LossConfig,
    grad_clip: float,
    ppo_epochs: int = 1,
    mini_batch_size: int | None = None,
    micro_batch_size: int | None = None,
    ref_model: torch.nn.Module | None = None,
    horizon: int | None = None,
    generator: torch.Generator | None = None,
) -> dict[str, float]:
    """Update `model` on `batch`; returns metrics averaged over optimizer steps.

    One optimizer step per mini-batch (`mini_batch_size` sequences, default all). Its gradient is
    accumulated over micro-batches of `micro_batch_size` sequences, each micro-batch's loss weighted by its
    share of the mini-batch's tokens (token-mean) or sequences (the seq-mean modes), so the step equals one
    pass over the whole mini-batch; micro-batches only bound memory and keep kernel shapes regular.

    old log-probs (pi_old, the ratio's denominator) are the policy's before this update. With one epoch and
    one mini-batch they equal the first forward's log-probs, so that forward serves both (exact, one pass
    saved); otherwise a no-grad pass computes them first. Replayed sequences therefore start at ratio 1
    (RLEP's "recomputed by the current policy"); `is_correction=truncate` adds weights min(pi_old/mu, cap)
    against their stored behaviour log-probs mu.
    """
    size = len(batch)
    mini = mini_batch_size or size
    micro = micro_batch_size or mini
    single_pass = ppo_epochs == 1 and mini >= size
    old_logp_all = None if single_pass else _logprobs(model, batch, micro)
    sums: dict[str, float] = defaultdict(float)
    updates = 0
    model.train()
    for _ in range(ppo_epochs):
        order = torch.randperm(size, generator=generator) if mini < size else torch.arange(size)
        for start in range(0, size, mini):
            index = order[start : start + mini]
            mb = batch.select(index)
            tokens_total = mb.mask.sum().clamp(min=1)
            step = _Accumulator()
            optimizer.zero_grad(set_to_none=True)
            for rows in _chunks(len(mb), micro):
                part = mb.select(rows)
                logp, entropy = token_logprobs(model, part.input_ids, part.attention_mask)
                old_logp = logp.detach() if old_logp_all is None else old_logp_all[index[rows], : logp.shape[1]]
                weights = None
                if loss_config.is_correction == "truncate":
                    stale = (part.is_replay & part.has_behaviour).unsqueeze(-1)
                    tis = truncated_importance_weights(old_logp, part.behaviour_logp, loss_config.is_cap)
                    weights = torch.where(stale, tis, torch.ones_like(tis))
                loss, metrics = clipped_policy_loss(
                    logp, old_logp, part.advantages, part.mask,
                    clip_low=loss_config.clip_low, clip_high=loss_config.clip_high, dual_clip=loss_config.dual_clip,
                    aggregation=loss_config.aggregation, token_weights=weights, horizon=horizon,
                )  # fmt: skip
                kl_value = torch.zeros(())
                if ref_model is not None:
                    ref_logp = _logprobs(ref_model, part, micro)[:, : logp.shape[1]]
                    kl_value = aggregate(kl_penalty(logp, ref_logp, loss_config.kl_estimator), part.mask, loss_config.aggregation, horizon)
                    loss = loss + loss_config.kl_coef * kl_value
                token_share = (part.mask.sum() / tokens_total).item()
                share = token_share if loss_config.aggregation == "token-mean" else len(part) / len(mb)
                (share * loss).backward()
                step.add(part, old_logp, entropy, metrics, token_share, share, loss.item(), kl_value.item())
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            optimizer.step()
            scheduler.step()
            updates += 1
            for name, value in step.result(grad_norm.item()).items():
                sums[name] += value
    model.eval()
    return {name: value / updates for name, value in sums.items()}


class _Accumulator:
    """Metrics of one optimizer step, gathered over its micro-batches.

    Token-level metrics (clip fractions, ratio, entropy) are weighted by token share; loss and kl by the
    loss weights. Two health metrics: `is_ratio_mean`, the mean pi_old / mu over replayed tokens with known
    behaviour log-probs (1 when none); `logprob_mismatch`, the mean |log pi_old - log mu| over fresh tokens,
    the engine-vs-trainer gap (vLLM's sampler against the torch model with the same weights), near 0.
    """

    def __init__(self) -> None:
        self.values: dict[str, float] = defaultdict(float)
        self.replay_ratio = [0.0, 0]  # sum, count
        self.mismatch = [0.0, 0]

    @torch.no_grad()
    def add(self, part: TrainingBatch, old_logp, entropy, metrics, token_share, share, loss, kl) -> None:
        for name, value in metrics.items():
            self.values[name] += token_share * value
        n_tokens = part.mask.sum().clamp(min=1)
        self.values["entropy"] += token_share * ((entropy * part.mask).sum() / n_tokens).item()
        self.values["loss"] += share * loss
        self.values["kl"] += share * kl
        tokens = part.mask.bool()
        replay = (part.is_replay & part.has_behaviour).unsqueeze(-1) & tokens
        fresh = (~part.is_replay & part.has_behaviour).unsqueeze(-1) & tokens
        self.replay_ratio[0] += torch.exp(old_logp - part.behaviour_logp)[replay].sum().item()
        self.replay_ratio[1] += int(replay.sum())
        self.mismatch[0] += (old_logp - part.behaviour_logp).abs()[fresh].sum().item()
        self.mismatch[1] += int(fresh.sum())

    def result(self, grad_norm: float) -> dict[str, float]:
        return {
            **self.values,
            "grad_norm": grad_norm,
            "is_ratio_mean": self.replay_ratio[0] / self.replay_ratio[1] if self.replay_ratio[1] else 1.0,
            "logprob_mismatch": self.mismatch[0] / self.mismatch[1] if self.mismatch[1] else 0.0,
        }
