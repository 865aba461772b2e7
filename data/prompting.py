"""Chat prompts: whether a model's tokenizer chat template renders the prompt, and rendering with it.

A chat model (Llama-3.1-8B-Instruct in RLEP's paper, any `*-Instruct` model) expects its turns wrapped in
its own markers; verl renders each row's `prompt` messages with `tokenizer.apply_chat_template(messages,
add_generation_prompt=True, tokenize=False)` and tokenises the result without adding special tokens
(`verl/utils/dataset/rl_dataset.py`). rlep does the same, through one function, `data.problem.render_prompt`:

    chat = chat_tokenizer(model, mode)                 # once per run: the tokenizer, or None for plain text
    prompt = render_prompt(problem, template, chat)    # every prompt of collection, training and evaluation

With a chat template, the user message is `template` filled with the problem (so an instruction such as
"put the final answer in \\boxed{}" still applies), unless the problem carries its own chat `messages`
(a verl row's system + user turns), which are used as they are. Without one, the prompt is `template`
filled with the problem, exactly as before chat templates existed (the tiny models have no template).

`mode` (the `chat_template` setting): `auto` uses the template when the tokenizer has one, `on` requires
one (an error names the model otherwise), `off` never uses it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

ChatTemplateMode = Literal["auto", "on", "off"]

CHAT_TEMPLATE_HELP = (
    "Render prompts with the model tokenizer's chat template (apply_chat_template with the generation "
    "prompt, as verl does): `auto` when the tokenizer has one, `on` always (an error if it has none), `off` "
    "never. prompt_template then fills the user message; a problem's own chat messages (verl rows) are used "
    "as they are."
)


class PromptError(ValueError):
    """A prompt that cannot be rendered as asked; the message names the model or the problem."""


def has_chat_template(tokenizer: Any) -> bool:
    """Whether `tokenizer` carries a chat template (transformers keeps it in `tokenizer.chat_template`)."""
    return bool(getattr(tokenizer, "chat_template", None))


def chat_tokenizer(model: str | Path | Any, mode: ChatTemplateMode = "auto") -> Any | None:
    """The tokenizer whose chat template renders prompts, or None for plain-text prompts.

    `model` is a model directory or name (its tokenizer is loaded) or a tokenizer already loaded. With
    `mode` `off` nothing is loaded. Raises PromptError for `on` with a tokenizer that has no template.
    """
    if mode == "off":
        return None
    if mode not in ("auto", "on"):
        raise PromptError(f"chat_template: {mode!r} is not one of auto, on, off")
    tokenizer = _load_tokenizer(model) if isinstance(model, str | Path) else model
    if has_chat_template(tokenizer):
        return tokenizer
    if mode == "on":
        raise PromptError(
            f"chat_template: on, but the tokenizer of {_name(model)} has no chat template (use auto or off)"
        )
    return None


def render_chat(tokenizer: Any, messages: Sequence[Mapping[str, str]]) -> str:
    """`messages` rendered by the tokenizer's chat template, ending with the assistant's turn opened."""
    turns = [{"role": m["role"], "content": m["content"]} for m in messages]
    if not turns or turns[-1]["role"] != "user":
        raise PromptError(f"a chat prompt must end with a user message, got roles {[t['role'] for t in turns]}")
    return tokenizer.apply_chat_template(turns, add_generation_prompt=True, tokenize=False)


@lru_cache(maxsize=4)  # a collection asks once per shard; the files of a model directory do not change under it
def _load_tokenizer(model: str | Path) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(model))
    except (OSError, ValueError) as err:
        raise PromptError(f"chat_template: cannot load the tokenizer of {model}: {err}") from None


def _name(model: Any) -> str:
    if isinstance(model, str | Path):
        return str(model)
    return getattr(model, "name_or_path", None) or type(model).__name__
