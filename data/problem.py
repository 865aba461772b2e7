"""The problem record every source yields, and the prompt template that turns it into model input."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# Short on purpose: the default model is character-level, so every prompt character costs a token.
DEFAULT_PROMPT_TEMPLATE = "Q: {problem}\nPut the final answer in \\boxed{{}}.\nA: "


@dataclass(frozen=True)
class Problem:
    """One math problem with its gold answer.

    `id` is unique within a source; `data_source` names the family (e.g. `tiny-math/frac`) so that
    metrics can be reported per family; `level` is a difficulty level (1 = easiest) or 0 when unknown.
    `messages` keeps a chat prompt as the file gave it (a tuple of {role, content} dicts, e.g. verl's
    `prompt` column; `problem` is then its last user message) so a chat template can render it; None for
    plain-text problems. `extra` keeps source fields a writer needs to give a row back in its own layout
    (for verl's: `data_source`, `ability`, `reward_style`, `index` with its original type, `split`,
    `question`; see data/verl_format.py); None when there are none. Both stay out of the hash.
    """

    id: str
    problem: str
    answer: str
    data_source: str
    level: int = 0
    messages: tuple[dict[str, str], ...] | None = field(default=None, hash=False)
    extra: dict[str, Any] | None = field(default=None, hash=False)

    def to_dict(self) -> dict:
        return asdict(self)


def check_prompt_template(template: str) -> None:
    """Refuse a template `render_prompt` could not fill: it needs `{problem}` and no other field (a literal brace is
    written `{{` or `}}`, as in the default's `\\boxed{{}}`). Checked with the settings, before any work starts."""
    if "{problem}" not in template:
        raise ValueError(f"prompt_template {template!r} must contain the `{{problem}}` placeholder")
    try:
        template.format(problem="")
    except (KeyError, IndexError, ValueError, AttributeError) as e:
        raise ValueError(
            f"prompt_template {template!r}: `{{problem}}` is its only field; write a literal brace as `{{{{` or "
            f"`}}}}` ({type(e).__name__}: {e})"
        ) from None


def render_prompt(problem: Problem | str, template: str = DEFAULT_PROMPT_TEMPLATE, chat: Any = None) -> str:
    """The model input for a problem, the one rendering collection, training and evaluation share.

    Plain text (`chat` None): `template` with `{problem}` filled in. With `chat`, a tokenizer with a chat
    template (`data.prompting.chat_tokenizer`): the problem's own chat `messages` when it has them, else
    that text as the one user message, rendered by the template with the assistant turn opened.
    """
    text = problem.problem if isinstance(problem, Problem) else problem
    if chat is None:
        return template.format(problem=text)
    from rlep.data.prompting import render_chat

    own = problem.messages if isinstance(problem, Problem) else None
    return render_chat(chat, own or [{"role": "user", "content": template.format(problem=text)}])
