"""Training prompts: which problems fit the engine's context, and the order they are drawn in (shuffled epochs,
resumable)."""

from __future__ import annotations

import logging
import random
from typing import Any

from rlep.data.problem import Problem, render_prompt
from rlep.data.prompt_length import fitting_problems
from rlep.tasks.engines import context_limit

log = logging.getLogger(__name__)


def fitting(problems: list[Problem], config: Any, tokenizer: Any, chat: Any = None, model: Any = None) -> list[Problem]:
    """The problems whose prompts, rendered as the run renders them (`config`: a TrainConfig), leave
    `config.sampling.max_tokens` of room in the engine's context; the others refused in one line, or left out and
    counted (`config.prompt_length`), before any engine starts. With the `model` directory, a `max_model_len` above
    what the engine takes of it is refused in one line too."""
    prompts = [render_prompt(p, config.prompt_template, chat) for p in problems]
    return fitting_problems(
        problems,
        prompts,
        chat or tokenizer,
        max_model_len=config.engine.max_model_len,
        max_new_tokens=config.sampling.max_tokens,
        overlong=config.prompt_length.overlong_prompts,
        model_limit=context_limit(model, config.engine) if model is not None else None,
    )


class PromptSampler:
    """Draws problems without replacement within an epoch, reshuffling at each epoch; seeded. A step that asks for
    more prompts than there are problems (`per_step`) draws some twice: it is said once, at the start."""

    def __init__(self, problems: list[Problem], seed: int, per_step: int | None = None) -> None:
        if not problems:
            raise ValueError("no training problems")
        if per_step is not None and per_step > len(problems):
            log.warning(
                "warning: prompts_per_step %d is more than the %d training problems (those whose prompts fit): "
                "every step draws some problems more than once (about %.1f times each); lower prompts_per_step or "
                "add problems",
                per_step,
                len(problems),
                per_step / len(problems),
            )
        self.problems = problems
        self.rng = random.Random(seed)
        self.order: list[int] = []
        self.position = 0
        self.epoch = 0

    def next(self, n: int) -> list[Problem]:
        picked: list[Problem] = []
        while len(picked) < n:
            if self.position >= len(self.order):
                self.order = list(range(len(self.problems)))
                self.rng.shuffle(self.order)
                self.position = 0
                self.epoch += 1
            take = self.order[self.position : self.position + n - len(picked)]
            picked.extend(self.problems[i] for i in take)
            self.position += len(take)
        return picked

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.getstate(), "order": self.order, "position": self.position, "epoch": self.epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.setstate(state["rng"])
        self.order, self.position, self.epoch = state["order"], state["position"], state["epoch"]
