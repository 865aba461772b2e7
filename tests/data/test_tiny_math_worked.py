"""Worked solutions of tiny-math: every step's arithmetic is right, styles differ, the checker catches errors."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from rlep.data.tiny_math import FAMILIES, LEVELS, generate
from rlep.data.tiny_math_worked import evaluate, step_errors, styles_for, worked_solution

CELLS = [(family, level) for family in FAMILIES for level in LEVELS]


def _problems(family: str, level: int, n: int = 150):
    return generate("train", n, seed=3, families=[family], levels=[level]) + generate(
        "test", 30, seed=3, families=[family], levels=[level]
    )


def _columns_value(text: str) -> Fraction:
    """The number a column-style solution writes: each column's last digit at its place, plus a final carry."""
    places = {"hundredths": -2, "tenths": -1, "ones": 0, "tens": 1, "hundreds": 2, "thousands": 3}
    value, sign = Fraction(0), 1
    for line in text.split("\n")[:-1]:
        label, _, rest = line.partition(": ")
        if label not in places:
            sign = -1 if "=-(" in line else sign
            continue
        digit = evaluate(rest.split(",")[0].split("=")[-1])
        value += (digit % 10) * Fraction(10) ** places[label]
    return sign * value


@pytest.mark.parametrize(("family", "level"), CELLS)
def test_every_step_is_right_and_the_steps_reach_the_gold(family, level):
    for problem in _problems(family, level):
        for style in styles_for(family, level):
            text = worked_solution(problem, style)
            assert step_errors(text) == [], (problem.id, style, text)
            lines = text.split("\n")
            assert lines[-1] == f"\\boxed{{{problem.answer}}}"
            if style == "column":
                assert _columns_value(text) == Fraction(problem.answer), (problem.id, text)
            else:  # the last chain ends on the answer's value
                last = lines[-2].partition(": ")[2] or lines[-2]
                assert evaluate(last.split("=")[-1]) == Fraction(problem.answer), (problem.id, style, text)
                # and starts from the problem itself (scaled: the second line divides back)
                if style != "scaled":
                    assert lines[0].startswith(problem.id.partition(":")[2]), text


@pytest.mark.parametrize(("family", "level"), CELLS)
def test_styles_differ_for_most_problems(family, level):
    problems = _problems(family, level, 100)
    distinct = [len({worked_solution(p, s) for s in styles_for(family, level)}) for p in problems]
    assert len(styles_for(family, level)) >= 2
    assert sum(d == len(styles_for(family, level)) for d in distinct) >= 0.8 * len(
        problems
    )  # a square like 7*7 reads the same both ways


def test_random_style_follows_the_rng_and_unknown_styles_are_refused():
    problem = generate("train", 1, families=["add"], levels=[2])[0]
    seen = {worked_solution(problem, rng=random.Random(seed)) for seed in range(20)}
    assert len(seen) == 2
    with pytest.raises(ValueError, match="style 'parts'"):
        worked_solution(generate("train", 1, families=["decimal"], levels=[3])[0], "parts")
    with pytest.raises(ValueError, match="unknown tiny-math family"):
        styles_for("division", 1)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("ones: 7+5=12, carry 1\ntens: 7+9=16\n\\boxed{172}", "carry from the previous column is missing"),
        ("ones: 7+5=13, carry 1\ntens: 7+9+1=17, carry 1\n\\boxed{172}", "not a chain of equal values"),
        ("ones: 10+3-6=7, borrow 1\ntens: 7-3=4\n\\boxed{37}", "borrow from the previous column is missing"),
        ("ones: 3+4=7, carry 1\ntens: 1+1+1=3\n\\boxed{37}", "carry from a column sum under 10"),
        ("77+95=77+90+5=157+5=162\n\\boxed{172}", "not a chain of equal values"),
        ("1/4+2/4=4/16+8/16=12/16=6/8=3/5\n\\boxed{3/4}", "not a chain of equal values"),
        ("x10: 55+44=99\n99/10=9.8\n\\boxed{9.9}", "not a chain of equal values"),
        ("so the answer is big\n\\boxed{9.9}", "not a step"),
        ("x10: __import__('os')\n\\boxed{1}", "not a step"),
    ],
)
def test_step_errors_finds_the_wrong_step(text, error):
    errors = step_errors(text)
    assert errors and error in " ".join(errors), errors


def test_evaluate_is_exact():
    assert evaluate("0.1+0.2") == Fraction(3, 10)
    assert evaluate("-(84-20-7)") == -57
    assert evaluate("(9*2)/(11*12)") == Fraction(3, 22)
    with pytest.raises(ValueError, match="not plain arithmetic"):
        evaluate("__import__('os')")
