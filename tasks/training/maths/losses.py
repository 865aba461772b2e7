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
- Policy shaping of a replayed trajectory (ExGRPO, arXiv 2510.02245, Sec. 4.2): on the rows a `PolicyShaping`
  names, either objective's token loss is replaced by -A f(w), w = pi / mu the ratio to the policy that generated
  the row, f(w) = w / (w + beta), unclipped.
- Second-moment trust (M2PO, Zheng et al. 2025, arXiv 2510.01161): instead of clipping each ratio, mask the
  tokens with the largest squared log-ratio log(pi / mu)^2 until the second moment of what is left is within a
  bound (`m2po_mask`), then the unclipped -A r on the rest (`m2po_loss`).

Advantages are [B] (one per sequence, broadcast over its tokens) or [B, T] (token-level: RL-ZVP's entropy-shaped
advantages of a flat group, `advantages.zero_variance_advantages`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

Aggregation = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


def per_token(advantages: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Advantages [B] or [B, T] as [B, 1] or [B, T] in `like`'s dtype: either broadcasts over [B, T]."""
    return (advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages).to(like.dtype)


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


@dataclass
class PolicyShaping:
    """The rows whose token loss is ExGRPO's policy shaping (arXiv 2510.02245, Sec. 4.2) instead of the objective's.

    `beta` [B]: beta of f(w) = w / (w + beta) for a shaped row, 0 for a row that keeps the objective's loss;
    `behaviour_logp` [B, T]: log mu, the log-probs of the policy that generated each row (stored with it).
    """

    beta: torch.Tensor
    behaviour_logp: torch.Tensor


def shaped_token_loss(
    logp: torch.Tensor, behaviour_logp: torch.Tensor, advantages: torch.Tensor, beta: torch.Tensor
) -> torch.Tensor:
    """ExGRPO's loss per token [B, T] (to minimise): -A f(w), w = exp(logp - behaviour_logp), f(w) = w / (w + beta).

    logp, behaviour_logp: [B, T]; advantages, beta: [B]. Per token and unclipped, as the authors' code
    (`off_policy_reshape=p_div_p_0.1`); the gradient is -A beta w / (w + beta)^2 d log pi, which is largest where
    w is near beta and vanishes as w grows, so a token the policy already favours pulls less (the paper's point:
    shaping amplifies low-probability tokens of the replayed trajectory instead of clipping).
    """
    w = torch.exp(logp - behaviour_logp)
    b = beta.unsqueeze(-1).to(logp.dtype).clamp(min=torch.finfo(logp.dtype).tiny)  # rows with beta 0 are not used
    return -per_token(advantages, logp) * w / (w + b)


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
    shaping: PolicyShaping | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO-clip surrogate loss (to minimise).

    logp, old_logp, mask, token_weights: [B, T]; advantages: [B] (broadcast over tokens) or [B, T].
    ratio = exp(logp - old_logp); loss_t = max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high)), then for A < 0
    min(loss_t, -A * dual_clip). `token_weights` (e.g. truncated IS weights, no gradient) scale each token.
    Metrics: clip_frac_low / clip_frac_high (share of tokens where the lower / upper bound is binding),
    dual_clip_frac, ratio_mean.
    """
    adv = per_token(advantages, logp)
    ratio = torch.exp(logp - old_logp)
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(unclipped, clipped)
    dual_active = torch.zeros_like(loss, dtype=torch.bool)
    if dual_clip is not None:
        bound = -adv * dual_clip
        dual_active = (adv < 0) & (loss > bound)
        loss = torch.where(adv < 0, torch.minimum(loss, bound), loss)
    value, real, n, shaped = _weighted(loss, mask, aggregation, horizon, token_weights, shaping, logp, advantages)
    with torch.no_grad():
        metrics = {
            **shaped,
            "clip_frac_low": (((adv < 0) & (ratio < 1.0 - clip_low)) & real).sum() / n,
            "clip_frac_high": (((adv > 0) & (ratio > 1.0 + clip_high)) & real).sum() / n,
            "dual_clip_frac": (dual_active & real).sum() / n,
            "ratio_mean": (ratio * mask).sum() / n,
        }
    return value, metrics


def _weighted(loss, mask, aggregation, horizon, token_weights, shaping=None, logp=None, advantages=None):
    """(aggregated loss after the per-token weights and the shaped rows' loss, the real-token mask, the real-token
    count, the shaping metrics) of a loss [B, T]."""
    if token_weights is not None:
        loss = loss * token_weights.detach()
    real = mask.bool()
    metrics = {}
    if shaping is not None:
        rows = (shaping.beta > 0).unsqueeze(-1)
        behaviour = shaping.behaviour_logp[:, : logp.shape[1]].to(logp.dtype)
        loss = torch.where(rows, shaped_token_loss(logp, behaviour, advantages, shaping.beta), loss)
        with torch.no_grad():
            tokens = rows & real
            count = tokens.sum()
            ratios = torch.where(tokens, torch.exp(logp - behaviour), 0.0).sum()
            metrics = {
                "shaped_token_frac": count / real.sum().clamp(min=1),
                "shaped_ratio_mean": torch.where(count > 0, ratios / count.clamp(min=1), math.nan),
            }
    return aggregate(loss, mask, aggregation, horizon), real, real.sum().clamp(min=1), metrics


def asymre_loss(
    logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    aggregation: Aggregation = "token-mean",
    token_weights: torch.Tensor | None = None,
    horizon: int | None = None,
    shaping: PolicyShaping | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """AsymRE loss (to minimise): -(r - V) * log pi per token, aggregated.

    logp, mask, token_weights: [B, T]; advantages: [B] = r - V (see `asymre_advantages`). No importance
    ratio and no clipping: the paper's off-policy REINFORCE; the bias from sampling with mu is what V's
    asymmetry controls. `shaping` replaces the loss of the rows it names, as in `clipped_policy_loss`.
    Metrics: the share of tokens with a positive advantage (`positive_token_frac`), and shaping's.
    """
    adv = per_token(advantages, logp)
    loss = -adv * logp
    value, real, n, shaped = _weighted(loss, mask, aggregation, horizon, token_weights, shaping, logp, advantages)
    with torch.no_grad():
        metrics = {**shaped, "positive_token_frac": ((adv > 0) & real).sum() / n}
    return value, metrics


def m2po_mask(
    log_ratio: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, threshold: float
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """M2PO's token mask (arXiv 2510.01161, Algorithm 1 as finally published): a bool [B, T], False on the masked
    tokens, and its metrics.

    log_ratio = log(pi / mu) [B, T] (mu: the policy that generated the token); advantages [B] or [B, T]; mask [B, T].
    The second moment M2 = mean (log r)^2 is taken over the trust-region tokens, those where PPO's clip could bind
    (A > 0 and r > 1, or A < 0 and r < 1). If it exceeds `threshold` (tau_M2, 0.04 in the paper), the tokens with the
    largest (log r)^2 are masked, one at a time from the largest, until the mean over those left is <= tau_M2: so
    the kept set is the longest prefix of the ascending order whose running mean stays within the bound. Masked
    tokens leave the loss but still count in its denominator (the paper's footnote 2). Without gradient.
    Metrics: `m2po_m2` (M2 before masking, over the trust-region tokens; 0 when there are none), `m2po_m2_kept`
    (after), `m2po_masked_frac` (masked tokens / real tokens).
    """
    with torch.no_grad():
        real = mask.bool()
        adv = per_token(advantages, log_ratio).expand_as(log_ratio)
        trust = real & (((adv > 0) & (log_ratio > 0)) | ((adv < 0) & (log_ratio < 0)))
        # Computed without reading the device (no boolean selection, no branch on a value): the trust-region
        # tokens' (log r)^2 sorted ascending come first, the other tokens (+inf) after them.
        squared = torch.where(trust, log_ratio.float().square(), math.inf).flatten()
        ordered, order = torch.sort(squared, stable=True)
        count = trust.sum()
        position = torch.arange(1, len(ordered) + 1, device=ordered.device)
        running = torch.cumsum(torch.where(position <= count, ordered, 0.0), 0) / position  # running means
        at = lambda n: running.gather(0, (n - 1).clamp(min=0).view(1))[0]  # noqa: E731  the n-th running mean
        m2 = torch.where(count > 0, at(count), 0.0)
        # running means only grow along the ascending order: those within tau_M2 are a prefix (all of them when
        # M2 itself is within it)
        kept = ((position <= count) & (running <= threshold)).sum()
        masked = torch.zeros_like(trust.flatten()).scatter(0, order, (position > kept) & (position <= count))
        keep = real & ~masked.view_as(real)
        metrics = {
            "m2po_m2": m2,
            "m2po_m2_kept": torch.where(kept > 0, at(kept), 0.0),
            "m2po_masked_frac": (real & ~keep).sum() / real.sum().clamp(min=1),
        }
    return keep, metrics


def m2po_loss(
    logp: torch.Tensor,
    behaviour_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    threshold: float = 0.04,
    aggregation: Aggregation = "token-mean",
    token_weights: torch.Tensor | None = None,
    horizon: int | None = None,
    shaping: PolicyShaping | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """M2PO's objective (to minimise): -A r on the tokens `m2po_mask` keeps, r = exp(logp - behaviour_logp), no clip.

    logp, behaviour_logp, mask: [B, T]; advantages: [B] or [B, T]. `behaviour_logp` is the ratio's denominator mu
    (the generating policy's log-probs where known, else pi_old: `update.off_policy_terms`). Masked tokens keep
    their place in the denominator (aggregation over `mask`). `shaping` replaces the rows it names, as elsewhere.
    Metrics: those of `m2po_mask` and `ratio_mean`.

    As the paper (arXiv 2510.01161, final version; Trinity-RFT implements the same): M2 over the tokens where the
    clip could bind (AReaL's description takes it over every token), tau_M2 = 0.04, masked tokens in the
    denominator, no clip on what is kept. Departures: the authors' released verl code does not mask but clips those
    tokens at exp(+-tau), tau the cap that brings M2 within the bound, with clip widths of at least 0.3 / 0.5 (we
    do as the paper says); M2 is taken over each micro-batch (where the loss is computed, as the released code
    does), not the mini-batch, and with several training processes over each rank's rows, so unlike every other
    loss here the update depends on `micro_batch_size`; for fresh rows pi_behav is the trainer's pi_old (the policy
    that generated them, without the engine-vs-trainer gap) and for stale rows the stored mu (rows without stored
    log-probs use pi_old: `update.off_policy_terms`); ppo-clip objective only (AsymRE has no ratio to replace).
    """
    log_ratio = logp - behaviour_logp
    keep, m2_metrics = m2po_mask(log_ratio.detach(), advantages, mask, threshold)
    ratio = torch.exp(log_ratio.clamp(max=20.0))  # exp overflows past ~88; a token that far out is masked anyway
    loss = torch.where(keep, -per_token(advantages, logp) * ratio, torch.zeros_like(ratio))
    value, real, n, shaped = _weighted(loss, mask, aggregation, horizon, token_weights, shaping, logp, advantages)
    with torch.no_grad():
        metrics = {**shaped, **m2_metrics, "ratio_mean": (ratio * mask).sum() / n}
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
