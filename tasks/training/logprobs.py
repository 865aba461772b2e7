"""Per-token log-probs of given completions under a torch causal LM (the trainer's view of a sample).

The distribution is the one rollouts are *sampled* from: logits divided by the sampling temperature (as
verl does), so a fresh rollout's ratio against vLLM's behaviour log-probs (`logprobs_mode=
"processed_logprobs"`) is 1 up to numerics. Top-p is not applied: with top_p < 1 the sampler renormalises
over the nucleus, so behaviour log-probs are higher than the trainer's by log(1 / nucleus mass) on each
token; the trainer's `logprob_mismatch` metric shows that gap (see docs/training.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.utils.checkpoint


def pad_sequences(
    prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded prompt+completion batch.

    Returns `input_ids` [B, T], `attention_mask` [B, T] and `completion_mask` [B, T-1], where
    `completion_mask[b, t]` is 1 when token t+1 of row b is a completion token (the positions whose
    log-prob the model predicts from position t).
    """
    lengths = [len(p) + len(c) for p, c in zip(prompts, completions)]
    width = max(lengths)
    input_ids = torch.full((len(lengths), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(lengths), width), dtype=torch.long)
    completion_mask = torch.zeros((len(lengths), width - 1), dtype=torch.float32)
    for row, (prompt, completion) in enumerate(zip(prompts, completions)):
        ids = list(prompt) + list(completion)
        input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        attention_mask[row, : len(ids)] = 1
        completion_mask[row, len(prompt) - 1 : len(ids) - 1] = 1
    return input_ids, attention_mask, completion_mask


# The float32 log-softmax is taken over at most this many [token x vocab] elements at a time (256 MB): with a
# 151,936-token vocabulary and 4,096-token answers a whole micro-batch's float32 log-probs would take 2.5 GB per
# sequence, twice (the values and what their backward keeps). The tiny models fit in one chunk.
LOGPROB_CHUNK_ELEMENTS = 1 << 26


def token_logprobs(
    model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob of each next token and the entropy of each next-token distribution, both [B, T-1] (float32),
    under the model's logits divided by `temperature`. Computed on the model's device."""
    param = next(model.parameters(), None)
    device = param.device if param is not None else model.device  # lora.AdaptersOff holds no parameters
    input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1]
    return logprobs_from_logits(logits, input_ids[:, 1:], temperature)


def logprobs_from_logits(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0, chunk_elements: int = LOGPROB_CHUNK_ELEMENTS
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob of `targets` [B, T] and the entropy under `logits` [B, T, V] / `temperature`, both [B, T] float32.

    The float32 log-softmax is computed a slice of the sequence at a time (at most `chunk_elements` B x t x V
    elements), so under bf16 compute no [B, T, V] float32 tensor is ever whole (under float32 compute only the
    logits themselves are); with several slices and gradients on, each slice is recomputed in the backward pass
    (activation checkpointing) instead of kept. One slice (the tiny models) is the plain computation, unchanged.
    """
    batch, tokens, vocab = logits.shape
    step = max(1, chunk_elements // max(1, batch * vocab))
    if step >= tokens:
        return _slice_logprobs(logits, targets, temperature)
    parts = []
    for piece in zip(logits.split(step, dim=1), targets.split(step, dim=1)):  # split: one concatenated gradient
        if torch.is_grad_enabled() and logits.requires_grad:
            parts.append(torch.utils.checkpoint.checkpoint(_slice_logprobs, *piece, temperature, use_reentrant=False))
        else:
            parts.append(_slice_logprobs(*piece, temperature))
    return torch.cat([p[0] for p in parts], dim=1), torch.cat([p[1] for p in parts], dim=1)


def _slice_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    logp_all = logits.log_softmax(-1)
    logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():  # a metric, not in the loss: no graph over [B, T, vocab] kept for it
        detached = logp_all.detach()
        entropy = -(detached.exp() * detached).sum(-1)
    return logp, entropy


@torch.no_grad()
def completion_logprobs(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    pad_id: int,
    temperature: float = 1.0,
) -> list[list[float]]:
    """For each (prompt, completion) pair, the model's log-prob (at `temperature`) of every completion token."""
    input_ids, attention_mask, mask = pad_sequences(prompts, completions, pad_id)
    logp, _ = token_logprobs(model, input_ids, attention_mask, temperature)
    return [row[m.bool()].tolist() for row, m in zip(logp, mask)]


@torch.no_grad()
def mean_completion_entropy(
    model: torch.nn.Module,
    prompt: Sequence[int],
    completions: Sequence[Sequence[int]],
    pad_id: int,
    temperature: float = 1.0,
    micro_batch_size: int | None = None,
) -> list[float]:
    """For each completion of `prompt`, the mean over its tokens of the model's next-token entropy (at
    `temperature`): H(o) = -(1/|o|) sum_t sum_v pi(v | q, o_<t) log pi(v | q, o_<t), ExGRPO's trajectory score
    (arXiv 2510.02245, Sec. 3.2). Computed `micro_batch_size` completions at a time (None: all at once)."""
    out: list[float] = []
    step = micro_batch_size or len(completions) or 1
    for start in range(0, len(completions), step):
        part = completions[start : start + step]
        input_ids, attention_mask, mask = pad_sequences([prompt] * len(part), part, pad_id)
        _, entropy = token_logprobs(model, input_ids, attention_mask, temperature)
        mask = mask.to(entropy.device)
        out += ((entropy * mask).sum(-1) / mask.sum(-1).clamp(min=1)).tolist()
    return out
