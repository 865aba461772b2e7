"""The problem record every source yields, and the prompt template that turns it into model input."""

from __future__ import annotations

from dataclasses import asdict, dataclass

# Short on purpose: the default model is character-level, so every prompt character costs a token.
DEFAULT_PROMPT_TEMPLATE = "Q: {problem}\nPut the final answer in \\boxed{{}}.\nA: "


@dataclass(frozen=True)
class Problem:
    """One math problem with its gold answer.

    `id` is unique within a source; `data_source` names the family (e.g. `tiny-math/frac`) so that
    metrics can be reported per family; `level` is a difficulty level (1 = easiest) or 0 when unknown.
    """

    id: str
    problem: str
    answer: str
    data_source: str
    level: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


def render_prompt(problem: Problem | str, template: str = DEFAULT_PROMPT_TEMPLATE) -> str:
    """The model input for a problem: `template` with `{problem}` filled in."""
    text = problem.problem if isinstance(problem, Problem) else problem
    return template.format(problem=text)
