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
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float = 1.0,
    chunk_elements: int = LOGPROB_CHUNK_ELEMENTS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob of each next token and the entropy of each next-token distribution, both [B, T-1] (float32),
    under the model's logits divided by `temperature`. Computed on the model's device.

    For an HF causal LM (Llama, Qwen2; also under DDP, peft LoRA, `lora.AdaptersOff` and FSDP2) the logits are
    never whole: the transformer body's final hidden states [B, T, H] go through the LM head a slice of the
    sequence at a time (`head_logprobs`, at most `chunk_elements` logits per slice, each recomputed in the
    backward pass), so neither the forward nor the backward holds a [B, T, V] tensor. The slices are taken inside
    the model's own forward (a hook on its body), so FSDP2's gathered head weight, autocast and the adapters apply
    as they do to the model's own head; the model itself is asked for its last position's logits only. Any other
    model falls back to its whole logits, then `logprobs_from_logits`."""
    param = next(model.parameters(), None)
    device = param.device if param is not None else model.device  # lora.AdaptersOff holds no parameters
    input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
    targets = input_ids[:, 1:]
    parts = _body_and_head(model)
    if parts is None:
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1]
        return logprobs_from_logits(logits, targets, temperature, chunk_elements)
    body, head = parts
    result: list[tuple[torch.Tensor, torch.Tensor]] = []

    def from_hidden(module, args, output) -> None:
        hidden = output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0]
        result.append(head_logprobs(hidden[:, :-1], head, targets, temperature, chunk_elements))

    handle = body.register_forward_hook(from_hidden)
    try:
        model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=1)
    finally:
        handle.remove()
    return result[0]


def _body_and_head(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module] | None:
    """(transformer body, LM head) of the HF causal LM inside `model` (through DDP's `module`, AdaptersOff's policy
    and peft's base model), or None where the head's logits are more than `head(hidden)` (soft-capping) or the
    model cannot be asked for fewer logits (no `logits_to_keep`)."""
    import inspect

    inner = model
    for _ in range(8):
        if isinstance(getattr(inner, "module", None), torch.nn.Module):  # DDP
            inner = inner.module
        elif isinstance(getattr(inner, "_policy", None), list):  # lora.AdaptersOff
            inner = inner._policy[0]
        elif callable(getattr(inner, "get_base_model", None)):  # peft
            inner = inner.get_base_model()
        else:
            break
    config = getattr(inner, "config", None)
    get_head = getattr(inner, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    body = getattr(inner, "base_model", None)
    if head is None or not isinstance(body, torch.nn.Module) or body is inner or config is None:
        return None
    if getattr(config, "final_logit_softcapping", None) is not None:
        return None
    if "logits_to_keep" not in inspect.signature(type(inner).forward).parameters:
        return None
    return body, head


def head_logprobs(
    hidden: torch.Tensor,
    head: torch.nn.Module,
    targets: torch.Tensor,
    temperature: float = 1.0,
    chunk_elements: int = LOGPROB_CHUNK_ELEMENTS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob of `targets` [B, T] and the entropy under `head(hidden)` / `temperature`, with `hidden` [B, T, H]
    (the final hidden states), both [B, T] float32: the head's logits are made a slice of the sequence at a time
    (at most `chunk_elements` B x t x V logits) and, with several slices and gradients on, each slice is recomputed
    in the backward pass (activation checkpointing), so at most one slice's logits exist at any time. One slice is
    the plain computation."""
    vocab = head.out_features if hasattr(head, "out_features") else head.weight.shape[0]
    batch, tokens = targets.shape
    step = max(1, chunk_elements // max(1, batch * vocab))
    if step >= tokens:
        return _head_slice(hidden, head, targets, temperature)
    checkpointed = torch.is_grad_enabled() and hidden.requires_grad
    parts = []
    for h, t in zip(hidden.split(step, dim=1), targets.split(step, dim=1)):  # split: one concatenated gradient
        if checkpointed:
            parts.append(torch.utils.checkpoint.checkpoint(_head_slice, h, head, t, temperature, use_reentrant=False))
        else:
            parts.append(_head_slice(h, head, t, temperature))
    return torch.cat([p[0] for p in parts], dim=1), torch.cat([p[1] for p in parts], dim=1)


def _head_slice(
    hidden: torch.Tensor, head: torch.nn.Module, targets: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    return _slice_logprobs(head(hidden), targets, temperature)


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
