"""Prompt length check before sampling: a prompt must leave room for a full answer in the model's context.

A prompt fits when `prompt tokens + max_new_tokens <= max_model_len`. The budget is verl's: its
`data.max_prompt_length` plus `max_response_length` is the context, and `filter_overlong_prompts` drops
longer prompts when the data set is read (verl/utils/dataset/rl_dataset.py). vLLM itself only refuses a
prompt longer than the whole context (with a long traceback), and silently cuts the answers of a prompt
that leaves less than `max_new_tokens`, which training would score as truncated. Here an overlong prompt
is an error naming the longest one (default), or with `overlong_prompts: filter` it is left out and
counted. `check_prompt_lengths` takes token counts and needs no tokenizer; `fitting_problems` counts the
rendered prompts with the model's tokenizer as the engines tokenise them (nothing added) and keeps the
problems that fit, the one call a collection, training or evaluation makes before its engine starts. Given the
model's own limit (`model_context_limit`: config.json's `max_position_embeddings`), it also refuses a
`max_model_len` above it, which vLLM refuses only after start-up, and never advises one above it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from rlep.data.source_rows import ProblemSourceError

log = logging.getLogger(__name__)
P = TypeVar("P")


class PromptTooLongError(ProblemSourceError):
    """Prompts that leave no room for a full answer; the one-line message says which and what to change.
    A problem-set error like any other the CLI reports in one line (exit code 2)."""


@dataclass(frozen=True)
class PromptLengthCheck:
    """The outcome of a check: indices (into the counts given) of the prompts kept and of those left out."""

    kept: tuple[int, ...]
    dropped: tuple[int, ...]
    budget: int  # most prompt tokens that leave max_new_tokens of room
    longest: int  # tokens of the longest prompt seen

    def summary(self) -> str:
        if not self.dropped:
            return f"all {len(self.kept)} prompts fit ({self.longest} tokens at most, budget {self.budget})"
        return (
            f"left out {len(self.dropped)} of {len(self.kept) + len(self.dropped)} prompts longer than "
            f"{self.budget} tokens"
        )


def check_prompt_lengths(
    token_counts: Sequence[int],
    *,
    max_model_len: int,
    max_new_tokens: int,
    overlong: Literal["error", "filter"] = "error",
    names: Sequence[str] | None = None,
    model_limit: int | None = None,
) -> PromptLengthCheck:
    """Which prompts fit in `max_model_len` with `max_new_tokens` of room; raise or drop the rest.

    `token_counts[i]` is the token count of prompt i as rendered for the engine; `names[i]` (e.g. a problem
    id) is used in the message. `overlong="error"` raises `PromptTooLongError` if any prompt does not fit;
    `"filter"` returns the fitting ones (and raises only when none fits). The order of the kept indices is
    the order of the counts. `model_limit` (the model's positions, `model_context_limit`), when known, refuses
    a `max_model_len` above it (vLLM would, with a long traceback) and keeps the advice within it.
    """
    if max_new_tokens < 1 or max_model_len < 1:
        raise ValueError(f"max_model_len ({max_model_len}) and max_new_tokens ({max_new_tokens}) must be at least 1")
    if model_limit is not None and max_model_len > model_limit:
        raise PromptTooLongError(
            f"max_model_len {max_model_len} is above the model's limit of {model_limit} tokens "
            f"(max_position_embeddings in its config.json): set the engine's max_model_len to {model_limit} or less"
        )
    budget = max_model_len - max_new_tokens
    if budget < 1:
        if model_limit is None:
            advice = "raise the engine's max_model_len or lower max_tokens"
        elif max_new_tokens >= model_limit:
            advice = f"lower max_tokens below {model_limit}, the model's limit"
        else:
            advice = f"raise the engine's max_model_len (the model's limit is {model_limit}) or lower max_tokens"
        raise PromptTooLongError(
            f"max_tokens ({max_new_tokens}, sampling) leaves no room for a prompt in the model's context of "
            f"{max_model_len} tokens (engine.max_model_len or the model's limit): {advice}"
        )
    kept = tuple(i for i, count in enumerate(token_counts) if count <= budget)
    dropped = tuple(i for i, count in enumerate(token_counts) if count > budget)
    longest = max(token_counts, default=0)
    if dropped and (overlong == "error" or not kept):
        worst = max(dropped, key=lambda i: token_counts[i])
        name = f" ({names[worst]})" if names is not None else ""
        what = "every prompt is" if not kept else f"{len(dropped)} of {len(token_counts)} prompts are"
        hint = "" if not kept else ", or set overlong_prompts to filter to leave them out"
        advice = _advice(token_counts[worst], max_model_len, max_new_tokens, model_limit)
        raise PromptTooLongError(
            f"{what} longer than {budget} tokens (max_model_len {max_model_len} - max new tokens {max_new_tokens}); "
            f"the longest{name} has {token_counts[worst]}: {advice}{hint}"
        )
    result = PromptLengthCheck(kept=kept, dropped=dropped, budget=budget, longest=longest)
    if dropped:
        log.warning("warning: prompt length: %s", result.summary())  # "warning:" lines reach the terminal
    return result


def _advice(longest: int, max_model_len: int, max_new_tokens: int, model_limit: int | None) -> str:
    """What makes the longest prompt fit, never a max_model_len above the model's limit (when it is known)."""
    if model_limit is None:
        return "raise the engine's max_model_len or lower max_tokens"
    needed = longest + max_new_tokens
    ways = []
    if needed <= model_limit:
        ways.append(f"raise the engine's max_model_len to {needed} (the model's limit is {model_limit})")
    elif max_model_len < model_limit and longest < model_limit:
        ways.append(
            f"set the engine's max_model_len to {model_limit}, the model's limit, and lower max_tokens to "
            f"{model_limit - longest} or less"
        )
    if longest < max_model_len:
        ways.append(f"lower max_tokens to {max_model_len - longest} or less")
    return " or ".join(ways) or f"it is longer than the model's limit of {model_limit} tokens"


# The config.json keys vLLM reads a model's length from (vllm/transformers_utils/model_arch_config_convertor.py,
# the smallest present wins), and the RoPE scalings whose factor it multiplies that length by.
_LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "max_sequence_length")
_STRETCHING_ROPE = ("linear", "dynamic")


def model_context_limit(model: str | Path | None) -> int | None:
    """The most tokens (prompt + answer) a local model takes: its config.json's `max_position_embeddings` (or
    GPT-2's `n_positions`, ...), times the factor of a linear or dynamic RoPE scaling, as vLLM derives it. None
    when it cannot be told (a hub name, no such key): then the engine is the judge."""
    if model is None:
        return None
    try:
        config = json.loads((Path(model) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    config = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    lengths = [config[key] for key in _LENGTH_KEYS if isinstance(config.get(key), int) and config[key] > 0]
    if not lengths:
        return None
    scaling = config.get("rope_scaling") or config.get("rope_parameters") or {}
    kind = scaling.get("rope_type") or scaling.get("type") if isinstance(scaling, dict) else None
    factor = scaling.get("factor") if kind in _STRETCHING_ROPE else None
    return int(min(lengths) * factor) if isinstance(factor, (int, float)) and factor > 0 else min(lengths)


def prompt_token_counts(prompts: Sequence[str], tokenizer: Any) -> list[int]:
    """Tokens of each rendered prompt as the engines tokenise it: the text is the whole model input (a chat
    template has put in any BOS it wants), so no special tokens are added. `tokenizer`: a Hugging Face one."""
    if not prompts:
        return []
    return [len(ids) for ids in tokenizer(list(prompts), add_special_tokens=False)["input_ids"]]


def fitting_problems(
    problems: Sequence[P],
    prompts: Sequence[str],
    tokenizer: Any,
    *,
    max_model_len: int,
    max_new_tokens: int,
    overlong: Literal["error", "filter"] = "error",
    model_limit: int | None = None,
) -> list[P]:
    """The problems whose rendered `prompts` (one per problem, same order) fit with `max_new_tokens` of room;
    the others raise `PromptTooLongError` or, with `overlong="filter"`, are left out and logged with a count.
    `model_limit` (the model's positions where the engine holds a context to them: `tasks.engines.context_limit`)
    refuses a `max_model_len` above it first."""
    if len(prompts) != len(problems):
        raise ValueError(f"{len(prompts)} prompts for {len(problems)} problems")
    check = check_prompt_lengths(
        prompt_token_counts(prompts, tokenizer),
        max_model_len=max_model_len,
        max_new_tokens=max_new_tokens,
        overlong=overlong,
        names=[str(getattr(p, "id", i)) for i, p in enumerate(problems)],
        model_limit=model_limit,
    )
    return [problems[i] for i in check.kept]
