"""Greedy accuracy of the tiny model, scored by the project's verifier (the measure of its stopping rule)."""

from __future__ import annotations

from collections import defaultdict

from rlep.data.problem import Problem, render_prompt


def greedy_responses(
    model, tokenizer, problems: list[Problem], max_new_tokens: int = 32, batch_size: int = 256
) -> list[str]:
    """`model`'s greedy completion of each problem's prompt (batched, left padding)."""
    import torch

    responses: list[str] = []
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(problems), batch_size):
            chunk = problems[start : start + batch_size]
            enc = tokenizer([render_prompt(p) for p in chunk], return_tensors="pt", padding=True, padding_side="left")
            out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False)
            responses += tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    model.train(was_training)
    return responses


def cell_accuracy(model, tokenizer, problems: list[Problem], max_new_tokens: int = 32) -> float:
    """Share of `problems` answered right greedily."""
    correct = _score(greedy_responses(model, tokenizer, problems, max_new_tokens), problems)
    return sum(correct) / len(correct) if correct else 0.0


def _score(responses: list[str], problems: list[Problem]) -> list[bool]:
    from rlep.verifiers import verify_batch

    if not problems:
        return []
    return [v.correct for v in verify_batch(responses, [p.answer for p in problems])]


def greedy_accuracy(model, tokenizer, problems: list[Problem], max_new_tokens: int = 32, batch_size: int = 256) -> dict:
    """Greedy accuracy of `model` on `problems`: overall, per data_source and per data_source/level.

    Answers are scored by the project's verifier, as in RL.
    """
    responses = greedy_responses(model, tokenizer, problems, max_new_tokens, batch_size)
    correct = _score(responses, problems)
    by_source: dict[str, list[bool]] = defaultdict(list)
    by_level: dict[str, list[bool]] = defaultdict(list)
    for problem, ok in zip(problems, correct):
        by_source[problem.data_source].append(ok)
        by_level[f"{problem.data_source}/level{problem.level}"].append(ok)

    def table(groups: dict[str, list[bool]]) -> dict[str, dict]:
        return {k: {"n": len(v), "accuracy": sum(v) / len(v)} for k, v in sorted(groups.items())}

    return {
        "scorer": "verifiers.verify_batch",
        "n": len(problems),
        "overall": sum(correct) / len(correct) if correct else 0.0,
        "by_data_source": table(by_source),
        "by_data_source_level": table(by_level),
        "examples": [
            {"problem": p.problem, "answer": p.answer, "response": r} for p, r in list(zip(problems, responses))[:8]
        ],
    }
