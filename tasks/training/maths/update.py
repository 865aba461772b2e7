"""One step's policy update: PPO-style epochs over mini-batches of a `TrainingBatch`."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

import torch

from rlep.tasks.settings.train import LossConfig, TrainConfig
from rlep.tasks.training.maths.advantages import zero_variance_advantages
from rlep.tasks.training.maths.batch import TrainingBatch, micro_batch_rows, mini_batches, row_lengths
from rlep.tasks.training.maths.logprobs import token_logprobs
from rlep.tasks.training.maths.losses import (
    PolicyShaping,
    aggregate,
    asymre_loss,
    clipped_policy_loss,
    kl_penalty,
    m2po_loss,
    truncated_importance_weights,
)


@dataclass(frozen=True)
class UpdateSettings:
    """How `policy_update` trains on a step's batch: the same for every step of a run, and for every rank (rank 0
    sends it to the others as it is: tasks/training/backends/distributed.py)."""

    loss: LossConfig
    grad_clip: float  # the global gradient norm is clipped to this
    ppo_epochs: int = 1  # passes over the batch
    updates_per_epoch: int = 1  # mini-batches per pass, one optimizer step each
    micro_batch_size: int | None = None  # sequences per forward and backward; None: the whole mini-batch
    horizon: int | None = None  # seq-mean-token-sum-norm's divisor (the rollouts' max_tokens); None: the batch's T
    temperature: float = 1.0  # the rollouts' sampling temperature: log-probs are of logits / temperature

    @classmethod
    def of_run(cls, config: TrainConfig) -> UpdateSettings:
        """A training run's update settings (`config.updates_per_epoch()`: mini-batches of `mini_batch_prompts`)."""
        return cls(
            config.loss,
            config.optimizer.grad_clip,
            ppo_epochs=config.ppo_epochs,
            updates_per_epoch=config.updates_per_epoch(),
            micro_batch_size=config.micro_batch_size,
            horizon=config.sampling.max_tokens,
            temperature=config.sampling.temperature,
        )


@torch.no_grad()
def _logprobs(
    model: torch.nn.Module,
    batch: TrainingBatch,
    micro: int,
    temperature: float,
    before_micro_batch: Callable[[], None] | None = None,
    data_parallel: DataParallel | None = None,
    lengths: torch.Tensor | None = None,
) -> torch.Tensor:
    """Log-probs [B, T-1] of `batch` under `model` at `temperature`, computed `micro` sequences at a time, longest
    first (`batch.micro_batch_rows`: less padding). `lengths` [B] (on the CPU): the rows' lengths, if known.

    With `data_parallel` each rank runs the forward over its own rows only (the update's sharding of the whole
    batch), every rank as many forwards (padded with a masked row: FSDP2 gathers in every forward), and the rows
    are summed over ranks into the whole [B, T-1] (each row nonzero on one rank only, so the sum is exact)."""
    lengths = row_lengths(batch) if lengths is None else lengths
    length = lengths.tolist()
    out = torch.zeros_like(batch.behaviour_logp)
    for rows in _micro_batches(batch.group.cpu(), lengths, micro, data_parallel):
        if before_micro_batch:
            before_micro_batch()
        if rows is None:
            part = _masked(batch.select(torch.zeros(1, dtype=torch.long), width=length[0]))
        else:
            part = batch.select(rows, width=max(length[i] for i in rows.tolist()))
        logp, _ = token_logprobs(model, part.input_ids, part.attention_mask, temperature)
        if rows is not None:
            out[rows.to(out.device), : logp.shape[1]] = logp
    return out if data_parallel is None else data_parallel.sum_rows(out)


def _micro_batches(
    group: torch.Tensor, lengths: torch.Tensor, micro: int, data_parallel: DataParallel | None
) -> list[torch.Tensor | None]:
    """This rank's micro-batches of the rows whose groups are `group` [B] and lengths `lengths` [B] (on the CPU): its
    rows (every row in one process, its share under `data_parallel`) cut longest first (`micro_batch_rows`), then
    None, a masked filler, up to the count every rank runs (FSDP2 hangs unless every rank runs as many forwards and
    backwards)."""
    mine = torch.arange(len(group)) if data_parallel is None else data_parallel.rows(group, lengths)
    chunks: list[torch.Tensor | None] = list(micro_batch_rows(mine, lengths, micro))
    if data_parallel is not None:
        chunks += [None] * (data_parallel.micro_batches(group, micro, lengths) - len(chunks))
    return chunks


def policy_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    batch: TrainingBatch,
    settings: UpdateSettings,
    ref_model: torch.nn.Module | None = None,
    generator: torch.Generator | None = None,
    before_micro_batch: Callable[[], None] | None = None,
    data_parallel: DataParallel | None = None,
) -> dict[str, float]:
    """Update `model` on `batch` as `settings` say: exactly `ppo_epochs` x `updates_per_epoch` optimizer steps.

    Each epoch splits the batch into `updates_per_epoch` mini-batches counted in prompts (`mini_batches`:
    whole groups, fresh and replayed members together, as verl's `ppo_mini_batch_size`), one optimizer step
    each, so every replay design makes the same number of updates at the same settings. A mini-batch's
    gradient is accumulated over micro-batches of `micro_batch_size` sequences, each micro-batch's loss weighted
    by its share of the mini-batch's tokens (token-mean) or sequences (the seq-mean modes), so the step equals
    one pass over the whole mini-batch; micro-batches only bound memory and keep kernel shapes regular. They are
    cut from the mini-batch's rows sorted by length (`batch.micro_batch_rows`), so each pads to a length near its
    rows' own; which rows a mini-batch holds (`mini_batches`) does not depend on the cut. Nothing is read back from
    the device within an optimizer step but once, after its last backward (its metrics and gradient norm).

    Log-probs are those of the sampling distribution: logits / `temperature` (the rollouts' temperature).
    old log-probs (pi_old, the ratio's denominator) are the policy's before this update, fixed once. With one
    epoch and one mini-batch they equal the first forward's log-probs, so that forward serves both (exact,
    one pass saved; the ratio is then 1 and the clip cannot act); otherwise a no-grad pass computes them
    first and every update after the first sees ratios != 1. Stale sequences (replayed, or fresh ones
    generated by an older policy) start at ratio 1 against pi_old (RLEP's "recomputed by the current policy")
    unless `loss.is_correction` corrects them against their stored behaviour log-probs mu
    (`off_policy_terms`). Rows with `shaping` > 0 (ExGRPO's replayed trajectory) train with policy shaping against
    their stored behaviour log-probs instead, unclipped (`losses.PolicyShaping`). `is_correction=m2po` trains with
    M2PO's masked, unclipped ratio instead of the clip (`losses.m2po_loss`). Rows of a flat group marked for
    RL-ZVP (`zero_variance`) get its entropy-shaped token advantages, from this forward's entropies
    (`advantages.zero_variance_advantages`). `token_mean_over=fresh` divides token-mean losses by the
    mini-batch's fresh tokens.
    `before_micro_batch` is called before each micro-batch's forward (async mode sets the thread count there).

    `data_parallel` (one rank of several, each holding the same `batch`: tasks/training/backends/distributed.py): the
    rank trains on its rows of each mini-batch, every rank running the same number of micro-batches (padded
    with a fully masked row); shares stay those of the whole mini-batch and the loss is scaled by its
    `loss_scale` (the ranks' gradients are averaged), and metrics are summed over ranks before averaging.

    Returns metrics averaged over optimizer steps, plus `optimizer_updates` (steps made), `tokens_trained`
    (completion tokens through the loss, summed over updates) and `padding_share` (the share of the token
    positions of the training forwards, all ranks', that are padding).
    """
    # The step's bookkeeping (lengths, token counts, which rows are shaped) is read from the batch on the CPU, where
    # it is built, so no micro-batch waits on the device; the device's metrics are read once per optimizer step.
    host = batch.to(torch.device("cpu"))
    lengths = row_lengths(host)
    length, row_tokens = lengths.tolist(), host.mask.sum(-1).tolist()
    fresh_row_tokens = [n * (not replayed) for n, replayed in zip(row_tokens, host.is_replay.tolist())]
    shaped_rows, zero_variance_rows = (host.shaping != 0).tolist(), (host.zero_variance != 0).tolist()
    batch = batch.to(next(model.parameters()).device)  # built on the CPU; a GPU model needs it on its device
    loss_config, horizon, temperature = settings.loss, settings.horizon, settings.temperature
    updates_per_epoch = settings.updates_per_epoch
    micro = settings.micro_batch_size or len(batch)
    single_pass = settings.ppo_epochs == 1 and updates_per_epoch == 1
    old_logp_all = (  # each rank computes its own rows' (the update's sharding), then they are shared
        None
        if single_pass
        else _logprobs(model, batch, micro, temperature, before_micro_batch, data_parallel, lengths=lengths)
    )
    fresh_tokens_per_update = sum(fresh_row_tokens) / updates_per_epoch
    sums: dict[str, float] = defaultdict(float)
    measured: dict[str, int] = defaultdict(int)
    updates, tokens_trained = 0, 0
    positions = [0, 0]  # token positions of this rank's training forwards: padding, all
    model.train()
    for _ in range(settings.ppo_epochs):
        shuffle = generator if updates_per_epoch > 1 else None
        for index in mini_batches(host.group, updates_per_epoch, shuffle):
            in_mb = index.tolist()
            mb_tokens = sum(row_tokens[i] for i in in_mb)
            if loss_config.token_mean_over == "all":
                tokens_total = max(mb_tokens, 1.0)
            else:  # a mini-batch without fresh tokens (FIFO's uniform draw) takes the step's mean, never 1
                tokens_total = sum(fresh_row_tokens[i] for i in in_mb) or fresh_tokens_per_update or max(mb_tokens, 1.0)
            step = _Accumulator(loss_config.is_cap if loss_config.is_correction == "truncate" else None)
            optimizer.zero_grad(set_to_none=True)
            chunks = _micro_batches(host.group[index], lengths[index], micro, data_parallel)
            for n_chunk, local in enumerate(chunks):
                if before_micro_batch:
                    before_micro_batch()
                padding = local is None
                rows = index[:1] if padding else index[local]  # rows of the step's batch
                in_part = rows.tolist()
                width = max(length[i] for i in in_part)
                part = _masked(batch.select(rows, width)) if padding else batch.select(rows, width)
                positions[0] += len(in_part) * width - sum(length[i] for i in in_part)
                positions[1] += len(in_part) * width
                if data_parallel is not None:
                    data_parallel.sync_gradients(model, last=n_chunk == len(chunks) - 1)
                logp, entropy = token_logprobs(model, part.input_ids, part.attention_mask, temperature)
                if old_logp_all is None:
                    old_logp = logp.detach()
                else:
                    old_logp = old_logp_all[rows.to(old_logp_all.device), : logp.shape[1]]
                ratio_base, weights = off_policy_terms(old_logp, part, loss_config)
                shaped = not padding and any(shaped_rows[i] for i in in_part)
                shaping = PolicyShaping(part.shaping, part.behaviour_logp) if shaped else None
                advantages = part.advantages
                zero_variance = not padding and any(zero_variance_rows[i] for i in in_part)
                if loss_config.zero_variance == "rl-zvp" and zero_variance:
                    advantages = zero_variance_advantages(
                        part.advantages, part.zero_variance, entropy, part.mask, loss_config.zvp_alpha
                    )
                if loss_config.objective.kind == "asymre":
                    loss, metrics = asymre_loss(
                        logp,
                        advantages,
                        part.mask,
                        aggregation=loss_config.aggregation,
                        token_weights=weights,
                        horizon=horizon,
                        shaping=shaping,
                    )
                elif loss_config.is_correction == "m2po":
                    loss, metrics = m2po_loss(
                        logp,
                        ratio_base,
                        advantages,
                        part.mask,
                        threshold=loss_config.m2po_threshold,
                        aggregation=loss_config.aggregation,
                        horizon=horizon,
                        shaping=shaping,
                    )
                else:
                    loss, metrics = clipped_policy_loss(
                        logp,
                        ratio_base,
                        advantages,
                        part.mask,
                        clip_low=loss_config.objective.clip_low,
                        clip_high=loss_config.objective.clip_high,
                        dual_clip=loss_config.objective.dual_clip,
                        aggregation=loss_config.aggregation,
                        token_weights=weights,
                        horizon=horizon,
                        shaping=shaping,
                    )
                kl_value = torch.zeros((), device=logp.device)
                if ref_model is not None:
                    ref_logp = _reference_logprobs(ref_model, part, temperature)[:, : logp.shape[1]]
                    kl_value = aggregate(
                        kl_penalty(logp, ref_logp, loss_config.kl_estimator),
                        part.mask,
                        loss_config.aggregation,
                        horizon,
                    )
                    loss = loss + loss_config.kl_coef * kl_value
                part_tokens = 0.0 if padding else sum(row_tokens[i] for i in in_part)
                token_share = part_tokens / max(mb_tokens, 1.0)  # the weight of its token metrics
                if loss_config.aggregation == "token-mean":
                    share = part_tokens / tokens_total
                else:
                    share = 0.0 if padding else len(part) / len(index)
                (share * loss if data_parallel is None else share * data_parallel.loss_scale * loss).backward()
                step.add(part, old_logp, entropy, metrics, token_share, share, loss.detach(), kl_value.detach())
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), settings.grad_clip)
            if hasattr(grad_norm, "full_tensor"):  # FSDP2: a DTensor (the global norm, replicated)
                grad_norm = grad_norm.full_tensor()
            step.to_host(grad_norm)  # the optimizer step's one wait on the device
            if data_parallel is not None:
                step.reduce(data_parallel)
            optimizer.step()
            scheduler.step()
            updates += 1
            tokens_trained += int(mb_tokens)
            for name, value in step.result().items():
                if not math.isnan(value):  # a metric an update did not measure (NaN) averages over those that did
                    sums[name] += value
                    measured[name] += 1
                else:
                    sums.setdefault(name, 0.0)
    model.eval()
    if data_parallel is not None:
        positions = [int(x) for x in data_parallel.all_reduce([float(x) for x in positions])]
    return {
        **{name: value / measured[name] if measured[name] else math.nan for name, value in sums.items()},
        "padding_share": positions[0] / positions[1] if positions[1] else 0.0,
        "optimizer_updates": updates,
        "tokens_trained": tokens_trained,
    }


def _reference_logprobs(ref_model: torch.nn.Module, part: TrainingBatch, temperature: float) -> torch.Tensor:
    """The KL reference's log-probs [b, t] of a micro-batch, without gradient."""
    with torch.no_grad():
        return token_logprobs(ref_model, part.input_ids, part.attention_mask, temperature)[0]


class DataParallel(Protocol):
    """One rank's view of a data-parallel update (implemented by tasks.training.backends.sharding.Sharding)."""

    loss_scale: float

    # this rank's rows of a mini-batch, from its rows' groups and tokens [B] (on the CPU); the count every rank runs
    def rows(self, group: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor: ...
    def micro_batches(self, group: torch.Tensor, micro: int, lengths: torch.Tensor) -> int: ...
    def sync_gradients(self, model: torch.nn.Module, last: bool) -> None: ...  # before a forward: sync on the last
    def all_reduce(self, values: list[float]) -> list[float]: ...  # sums over ranks
    def sum_rows(self, rows: torch.Tensor) -> torch.Tensor: ...  # a tensor summed over ranks (each fills its rows)


def _masked(batch: TrainingBatch) -> TrainingBatch:
    """`batch` with no token in the loss: a padding micro-batch (zero gradient, zero metric weight)."""
    return replace(
        batch,
        mask=torch.zeros_like(batch.mask),
        advantages=torch.zeros_like(batch.advantages),
        has_behaviour=torch.zeros_like(batch.has_behaviour),
        zero_variance=torch.zeros_like(batch.zero_variance),
    )


def off_policy_terms(
    old_logp: torch.Tensor, part: TrainingBatch, loss: LossConfig
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The PPO ratio's denominator [B, T] and the per-token weights ([B, T] or None) for `loss.is_correction`.

    Only *stale* rows with known behaviour log-probs mu are corrected (replayed, or generated by an older
    policy); fresh rows of the current policy keep (pi_old, weight 1).
    - `none`: (pi_old, None): stale rows are treated as on-policy (RLEP's paper).
    - `truncate`: decoupled PPO (Hilton et al. 2021, arXiv 2110.00641): the clip acts around the proximal
      policy pi_old, and each stale token is weighted by min(pi_old / mu, is_cap), the truncated importance
      weight of the policy that generated it (IMPALA's truncated rho). AReaL's decoupled loss has the same
      shape but drops a token whose weight exceeds its cap (weight 0, `behav_imp_weight_cap`); rlep
      truncates, so such a token still counts, at weight is_cap (see `losses.truncated_importance_weights`).
    - `behaviour`: the ratio's denominator is mu itself, so the clip acts against the generating policy
      (plain PPO on stale data): a token whose probability has already moved past the clip range since it
      was generated gives no gradient.
    - `m2po`: the same denominator, pi_behav of M2PO's ratio (mu for stale rows; for fresh rows the current
      policy's own pi_old, which generated them, so the engine-vs-trainer gap is not counted as staleness).
    """
    if loss.is_correction == "none":
        return old_logp, None
    stale = ((part.is_replay | (part.age > 0)) & part.has_behaviour).unsqueeze(-1)
    behaviour = part.behaviour_logp[:, : old_logp.shape[1]].to(old_logp.dtype)
    if loss.is_correction == "truncate":
        tis = truncated_importance_weights(old_logp, behaviour, loss.is_cap)
        return old_logp, torch.where(stale, tis, torch.ones_like(tis))
    return torch.where(stale, behaviour, old_logp), None  # behaviour, m2po


class _Accumulator:
    """Metrics of one optimizer step, gathered over its micro-batches.

    Token-level metrics (clip fractions, ratio, entropy) are weighted by token share; loss and kl by the
    loss weights. Two health metrics: `is_ratio_mean`, the mean pi_old / mu over stale (replayed, or generated
    by an older policy) tokens with known behaviour log-probs (1 when none); `logprob_mismatch`, the mean
    |log pi_old - log mu| over fresh tokens, the engine-vs-trainer gap (vLLM's sampler against the torch model
    with the same weights), near 0; with truncated IS only, `is_capped_frac`, the share of stale tokens whose
    weight the cap binds (0 means the cap never acts; NaN, no stale token to weight).

    What the device computes stays there, summed in float64, until `to_host` reads it all at once after the
    optimizer step's last backward: no micro-batch waits for the device.
    """

    def __init__(self, is_cap: float | None = None) -> None:
        self.is_cap = is_cap  # truncated IS on: count the stale tokens whose weight the cap binds
        self.values: dict[str, float | torch.Tensor] = defaultdict(float)
        self.replay_ratio: list[float | torch.Tensor] = [0.0, 0]  # sum, count
        self.mismatch: list[float | torch.Tensor] = [0.0, 0]
        self.capped: list[float | torch.Tensor] = [0, 0]  # stale tokens whose importance weight hit is_cap, weighted
        self.grad_norm = math.nan

    @torch.no_grad()
    def add(self, part: TrainingBatch, old_logp, entropy, metrics, token_share, share, loss, kl) -> None:
        for name, value in metrics.items():
            self.values[name] += token_share * value
        n_tokens = part.mask.sum().clamp(min=1)
        self.values["entropy"] += token_share * ((entropy * part.mask).sum() / n_tokens).double()
        self.values["loss"] += share * loss.double()
        self.values["kl"] += share * kl.double()
        tokens = part.mask.bool()
        stale = part.is_replay | (part.age > 0)
        replay = (stale & part.has_behaviour).unsqueeze(-1) & tokens
        fresh = (~stale & part.has_behaviour).unsqueeze(-1) & tokens
        ratio_to_behaviour = torch.exp(old_logp - part.behaviour_logp)
        # sums under a mask, not over a boolean selection: a selection's size is data the host would wait for
        self.replay_ratio[0] += torch.where(replay, ratio_to_behaviour, 0.0).sum().double()
        self.replay_ratio[1] += replay.sum()
        self.mismatch[0] += torch.where(fresh, (old_logp - part.behaviour_logp).abs(), 0.0).sum().double()
        self.mismatch[1] += fresh.sum()
        if self.is_cap is not None:
            self.capped[0] += ((ratio_to_behaviour > self.is_cap) & replay).sum()
            self.capped[1] += replay.sum()

    def to_host(self, grad_norm: torch.Tensor) -> None:
        """Read every value the device holds (and the step's gradient norm) in one transfer."""
        names = sorted(self.values)
        pairs = (self.replay_ratio, self.mismatch, self.capped)
        flat = [self.values[n] for n in names] + [x for pair in pairs for x in pair] + [grad_norm]
        on_device = [i for i, x in enumerate(flat) if isinstance(x, torch.Tensor)]
        if on_device:
            read = torch.stack([flat[i].detach().double().reshape(()).to(grad_norm.device) for i in on_device])
            for i, value in zip(on_device, read.tolist()):
                flat[i] = value
        self.values = defaultdict(float, zip(names, flat[: len(names)]))
        for i, pair in enumerate(pairs):
            pair[:] = flat[len(names) + 2 * i : len(names) + 2 * i + 2]
        self.grad_norm = flat[-1]

    def reduce(self, data_parallel: DataParallel) -> None:
        """Sum every rank's weighted metrics and counts (shares are of the whole mini-batch, so sums are means)."""
        names = sorted(self.values)
        pairs = (self.replay_ratio, self.mismatch, self.capped)
        total = data_parallel.all_reduce([self.values[n] for n in names] + [x for pair in pairs for x in pair])
        self.values = defaultdict(float, zip(names, total[: len(names)]))
        for i, pair in enumerate(pairs):
            pair[:] = total[len(names) + 2 * i : len(names) + 2 * i + 2]

    def result(self) -> dict[str, float]:
        return {
            **self.values,
            "grad_norm": self.grad_norm,
            "is_ratio_mean": self.replay_ratio[0] / self.replay_ratio[1] if self.replay_ratio[1] else 1.0,
            "logprob_mismatch": self.mismatch[0] / self.mismatch[1] if self.mismatch[1] else 0.0,
            # Only where truncated IS runs; NaN in an update with no stale token to weight (0 would read "never binds").
            **(
                {"is_capped_frac": self.capped[0] / self.capped[1] if self.capped[1] else math.nan}
                if self.is_cap is not None
                else {}
            ),
        }
