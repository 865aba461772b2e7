"""The supervised data of the tiny model: a seeded stream of (prompt, [worked steps,] boxed answer) batches,
and the held-out problems its stopping rule measures."""

from __future__ import annotations

import random
from dataclasses import dataclass

from rlep.data.problem import Problem, render_prompt
from rlep.data.tiny_math import answer_forms, generate
from rlep.data.tiny_math_worked import worked_solution
from rlep.data.tiny_model.config import TinyModelConfig


@dataclass(frozen=True)
class Example:
    """One supervised sequence: prompt then target, as token ids; the loss covers the target only."""

    input_ids: list[int]
    prompt_len: int


def target_text(answer: str, rng: random.Random, gold_form_share: float) -> str:
    """The completion the model is trained to write for a gold answer, e.g. `\\boxed{3/4}</s>`."""
    forms = answer_forms(answer)
    form = forms[0] if len(forms) == 1 or rng.random() < gold_form_share else rng.choice(forms[1:])
    return f"\\boxed{{{form}}}"


def training_pool(config: TinyModelConfig) -> dict[tuple[str, int], list[Problem]]:
    """The distinct TRAIN problems of each cell: `train_problems` shared by cell weight."""
    weights = config.cell_weights()
    total = sum(weights.values())
    pool = {}
    for (family, level), weight in weights.items():
        n = max(1, round(config.train_problems * weight / total))
        pool[(family, level)] = generate("train", n, seed=config.seed, families=[family], levels=[level])
    return pool


def training_stream(config: TinyModelConfig, tokenizer) -> list[list[Example]]:
    """All batches of the run, drawn up front from a seeded RNG (cell by weight, then problem, then form)."""
    rng = random.Random(f"rlep-tiny-sft/{config.seed}")
    pool = training_pool(config)
    cells = list(pool)
    cell_w = [config.cell_weights()[c] for c in cells]
    eos = tokenizer.eos_token
    cache: dict[str, list[int]] = {}

    def encode(text: str) -> list[int]:
        if text not in cache:
            cache[text] = tokenizer(text, add_special_tokens=False)["input_ids"]
        return cache[text]

    batches = []
    for _ in range(config.steps):
        batch = []
        for cell in rng.choices(cells, weights=cell_w, k=config.batch_size):
            problem = rng.choice(pool[cell])
            prompt = encode(render_prompt(problem))
            target = target_text(problem.answer, rng, config.gold_form_share)
            if config.solutions == "worked":
                steps = worked_solution(problem, rng=rng).rpartition("\n")[0]
                target = f"{steps}\n{target}"
            target = encode(target + eos)
            batch.append(Example(prompt + target, len(prompt)))
        batches.append(batch)
    return batches


def collate(batch: list[Example], pad_id: int):
    """Right-padded `input_ids` and `labels` (-100 outside the targets) tensors of shape (batch, length)."""
    import torch

    length = max(len(e.input_ids) for e in batch)
    ids = torch.full((len(batch), length), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), length), -100, dtype=torch.long)
    for row, example in enumerate(batch):
        n = len(example.input_ids)
        ids[row, :n] = torch.tensor(example.input_ids)
        labels[row, example.prompt_len : n] = ids[row, example.prompt_len : n]
    return ids, labels


def check_problems(config: TinyModelConfig) -> list[Problem]:
    """TRAIN problems of the stop cell that the supervised stream never shows: what the stopping rule measures.

    Drawn after the cell's training problems from the same seeded generator, so they are disjoint from them
    and from the test split (the final, reported measurement).
    """
    target = config.stop_target()
    if target is None:
        return []
    family, level = target
    seen = {p.id for p in training_pool(config)[target]}
    candidates = generate(
        "train", len(seen) + config.check_problems, seed=config.seed, families=[family], levels=[level]
    )
    held_out = [p for p in candidates if p.id not in seen][: config.check_problems]
    if len(held_out) < min(50, config.check_problems):
        raise ValueError(
            f"stop_cell {config.stop_cell!r}: only {len(held_out)} train problems left outside the training pool"
        )
    return held_out
