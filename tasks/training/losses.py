"""Policy-gradient loss with the policy constraints of the RLEP recipe, as pure functions.

Shapes: B sequences, T token positions (completion tokens only, right-padded); `mask` [B, T] is 1 on real
completion tokens. The two objectives return the value and a dict of float metrics; the helpers return tensors.

- Clipped importance ratio with separate low/high bounds (PPO, Schulman et al. 2017; "clip-higher" from
  DAPO, arXiv 2503.14476: 0.2 / 0.28, the RLEP defaults).
- Dual clip (Ye et al. 2020, arXiv 1912.09729): for negative advantages the loss is bounded by -A * c.
- Loss aggregation as in verl: `token-mean` (DAPO; RLEP's default), `seq-mean-token-mean` (original GRPO),
  `seq-mean-token-sum-norm` (Dr. GRPO, arXiv 2503.20783: token sums divided by a constant horizon).
- KL to a frozen reference with the k1 or k3 estimator (Schulman, "Approximating KL divergence", 2020).
- Asymmetric REINFORCE (AsymRE; Arnal et al. 2025, arXiv 2506.20520): the off-policy REINFORCE objective
  E_mu[(r - V) log pi] with no ratio and no clip; V slightly below the expected reward keeps it stable on
  stale data (its advantages come from `advantages.asymre_advantages`).
- Truncated importance weights for stale samples (TIS; as in IMPALA's truncated rho, Espeholt et al. 2018,
  and verl's TIS): w = min(pi_old / mu, cap) with mu the behaviour policy that generated the sample. A token
  above the cap is truncated, not dropped: it keeps its gradient at weight `cap`, so every stale token still
  counts and the variance stays bounded, at a bias on the capped tokens only. AReaL's decoupled loss instead
  drops such tokens (weight 0 above `behav_imp_weight_cap`), which bounds the weight as well but takes the
  tokens the policy has moved furthest towards out of the update.
"""

from __future__ import annotations

from typing import Literal

import torch

Aggregation = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


def aggregate(values: torch.Tensor, mask: torch.Tensor, mode: Aggregation, horizon: int | None = None) -> torch.Tensor:
    """Reduce per-token `values` [B, T] over real tokens to a scalar.

    `horizon` (seq-mean-token-sum-norm only) is the constant divisor; default T.
    """
    mask = mask.to(values.dtype)
    if mode == "token-mean":
        return (values * mask).sum() / mask.sum().clamp(min=1)
    if mode == "seq-mean-token-mean":
        per_seq = (values * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        return per_seq.mean()
    if mode == "seq-mean-token-sum-norm":
        per_seq = (values * mask).sum(-1) / float(horizon or values.shape[-1])
        return per_seq.mean()
    raise ValueError(f"unknown loss aggregation {mode!r}")


def clipped_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    dual_clip: float | None = 10.0,
    aggregation: Aggregation = "token-mean",
    token_weights: torch.Tensor | None = None,
    horizon: int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO-clip surrogate loss (to minimise).

    logp, old_logp, mask, token_weights: [B, T]; advantages: [B] (one per sequence, broadcast over tokens).
    ratio = exp(logp - old_logp); loss_t = max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high)), then for A < 0
    min(loss_t, -A * dual_clip). `token_weights` (e.g. truncated IS weights, no gradient) scale each token.
    Metrics: clip_frac_low / clip_frac_high (share of tokens where the lower / upper bound is binding),
    dual_clip_frac, ratio_mean.
    """
    adv = advantages.unsqueeze(-1).to(logp.dtype)
    ratio = torch.exp(logp - old_logp)
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(unclipped, clipped)
    dual_active = torch.zeros_like(loss, dtype=torch.bool)
    if dual_clip is not None:
        bound = -adv * dual_clip
        dual_active = (adv < 0) & (loss > bound)
        loss = torch.where(adv < 0, torch.minimum(loss, bound), loss)
    value, real, n = _weighted(loss, mask, aggregation, horizon, token_weights)
    with torch.no_grad():
        metrics = {
            "clip_frac_low": (((adv < 0) & (ratio < 1.0 - clip_low)) & real).sum().item() / n,
            "clip_frac_high": (((adv > 0) & (ratio > 1.0 + clip_high)) & real).sum().item() / n,
            "dual_clip_frac": (dual_active & real).sum().item() / n,
            "ratio_mean": (ratio * mask).sum().item() / n,
        }
    return value, metrics


def _weighted(loss, mask, aggregation, horizon, token_weights):
    """(aggregated loss after the per-token weights, the real-token mask, the real-token count) of a loss."""
    if token_weights is not None:
        loss = loss * token_weights.detach()
    real = mask.bool()
    return aggregate(loss, mask, aggregation, horizon), real, real.sum().clamp(min=1).item()


def asymre_loss(
    logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    aggregation: Aggregation = "token-mean",
    token_weights: torch.Tensor | None = None,
    horizon: int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """AsymRE loss (to minimise): -(r - V) * log pi per token, aggregated.

    logp, mask, token_weights: [B, T]; advantages: [B] = r - V (see `asymre_advantages`). No importance
    ratio and no clipping: the paper's off-policy REINFORCE; the bias from sampling with mu is what V's
    asymmetry controls. Metrics: the share of tokens with a positive advantage (`positive_token_frac`).
    """
    adv = advantages.unsqueeze(-1).to(logp.dtype)
    loss = -adv * logp
    value, real, n = _weighted(loss, mask, aggregation, horizon, token_weights)
    with torch.no_grad():
        metrics = {"positive_token_frac": ((adv > 0) & real).sum().item() / n}
    return value, metrics


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: Literal["k1", "k3"] = "k3") -> torch.Tensor:
    """Per-token estimate [B, T] of KL(pi || pi_ref) from samples of pi.

    k1 = log pi - log pi_ref (unbiased, can be negative); k3 = exp(d) - d - 1 with d = log pi_ref - log pi
    (unbiased, always >= 0, lower variance).
    """
    if estimator == "k1":
        return logp - ref_logp
    if estimator == "k3":
        d = (ref_logp - logp).clamp(-20.0, 20.0)
        return torch.exp(d) - d - 1.0
    raise ValueError(f"unknown KL estimator {estimator!r}")


def truncated_importance_weights(
    old_logp: torch.Tensor, behaviour_logp: torch.Tensor, cap: float = 2.0
) -> torch.Tensor:
    """Per-token weights [B, T] = min(exp(old_logp - behaviour_logp), cap), without gradient.

    Corrects a stale sample (drawn by behaviour policy mu) towards the policy being updated. Truncated: a weight
    above `cap` becomes `cap` (IMPALA's truncated rho), never 0 as in AReaL's filter.
    """
    return torch.exp(old_logp - behaviour_logp).clamp(max=cap).detach()


def overlong_penalty(lengths: torch.Tensor, max_tokens: int, buffer: int, factor: float = 1.0) -> torch.Tensor:
    """DAPO's soft overlong punishment (arXiv 2503.14476, Eq. 13), added to the reward: 0 up to
    max_tokens - buffer, then falling linearly to -factor at max_tokens."""
    if buffer <= 0:
        return torch.zeros_like(lengths, dtype=torch.float32)
    start = max_tokens - buffer
    return (-(lengths.float() - start).clamp(min=0) / buffer * factor).clamp(min=-factor)
