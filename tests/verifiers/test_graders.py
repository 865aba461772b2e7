"""Cases from other open graders' test suites, and the false positives a reward must never give.

Each row names its source; only the facts (gold, prediction, verdict) are taken, and where the source
leaves the verdict implicit (a debugging example) only rows whose verdict is mathematically certain
are kept. Predictions are whole responses, as the source wrote them. A false positive (a wrong answer
rewarded) is the worst error a reward can make: the policy learns to produce it.
"""

from __future__ import annotations

import pytest
from math_verify import parse, verify

from rlep.tasks.settings.verifier import VerifierConfig
from rlep.verifiers import verify_batch
from rlep.verifiers.judge import judge

MATH_VERIFY = "huggingface/Math-Verify tests/test_all.py"
OPEN_INSTRUCT = "allenai/open-instruct open_instruct/test_ground_truth_utils.py (GSM8K verifier)"
QWEN_MATH = "QwenLM/Qwen2.5-Math evaluation/grader.py (_test_math_equal examples)"

# (source, gold, prediction, expected)
CASES: list[tuple[str, str, str, bool]] = [
    # Relations: chains keep their last value, inequalities flip, equations are equal up to a factor.
    (MATH_VERIFY, "$x = 11$", "$x = 5+5+1 = 7 =11$", True),
    (MATH_VERIFY, "$x = 1/3$", "$x = 5+5+1 = 1/3 \\approx 11$", True),
    (MATH_VERIFY, "$x <= 1$", "$-x >= -1$", True),
    (MATH_VERIFY, "$z = 1 + 1 = 2$", "$z = 3+3 = 2$", True),
    (MATH_VERIFY, "$2x+4y-3=0$", "$y=-\\frac{1}{2}x+\\frac{3}{4}$", True),
    (MATH_VERIFY, "$x^2/4 + y^2/3 = 1$", "$x^2/16 + y^2/12 = 1/4$", True),
    # Signed numbers in GSM8K-style answers.
    (OPEN_INSTRUCT, "-3", "Therefore the answer is -3", True),
    (OPEN_INSTRUCT, "+7", "Therefore the answer is +7", True),
    (OPEN_INSTRUCT, "-3.5", "Final answer: -3.5", True),
    (OPEN_INSTRUCT, "-3", "The result is \\\\boxed{-3}", True),
    (OPEN_INSTRUCT, "-3", "Therefore the answer is 3", False),
    # Algebraic identities and near misses.
    (QWEN_MATH, "\\frac{x+2}{7}", "\\boxed{\\frac{x}{7}+\\frac{2}{7}}", True),
    (QWEN_MATH, "\\tan^2(y)+1", "\\boxed{\\sec^2(y)}", True),
    (QWEN_MATH, "34x+45y-20z+100=0", "\\boxed{-34x-45y+20z-100=0}", True),
    (
        QWEN_MATH,
        "\\frac{\\sqrt{\\sqrt{11}+\\sqrt{194}}}{15+2\\sqrt{33}}",
        "\\boxed{\\frac{\\sqrt{\\sqrt{11}+\\sqrt{194}}}{2\\sqrt{33}+15}}",
        True,
    ),
    (QWEN_MATH, "(a+5)(b+2)", "\\boxed{(+5)(b+2)}", False),
    (QWEN_MATH, "2", "\\boxed{\\frac{1+\\sqrt{5}}{2}}", False),
    (QWEN_MATH, "x+2n+1", "\\boxed{x+1}", False),
]


@pytest.fixture(scope="module")
def verdicts():
    return verify_batch([pred for _, _, pred, _ in CASES], [gold for _, gold, _, _ in CASES])


@pytest.mark.parametrize(("index", "source", "gold", "pred", "expected"), [(i, *case) for i, case in enumerate(CASES)])
def test_other_graders_cases(verdicts, index, source, gold, pred, expected):
    assert verdicts[index].correct is expected, (source, verdicts[index])


# Equations judged by their right side alone (issue 26): wrong answers rewarded. Each row is also
# rejected by math-verify, checked below on the same strings.
FALSE_POSITIVES: list[tuple[str, str]] = [
    ("\\sin(x)=\\frac{42}{59}", "\\cos(x)=\\frac{42}{59}"),
    ("x+y=1", "x-y=1"),
    ("x=6", "2x=6"),
    ("BC=5", "AB=5"),
    ("y=3", "x=3"),
    ("f(x)=2x", "g(x)=2x"),
    ("x^2+y^2=1", "x^2-y^2=1"),
    # Function notation against `y` (issue 34) reopens none of these: `x` is the function's variable,
    # `\sin` names no function being defined, and `y` in a right side makes `y = ...` an equation in `y`.
    ("f(x)=2x+3", "x=2x+3"),
    ("f(y)=2y+3", "y=2y+3"),
    ("\\sin(x)=\\frac{1}{2}", "y=\\frac{1}{2}"),
    ("f(x)=2x+y", "y=2x+y"),
]


@pytest.mark.parametrize(("gold", "pred"), FALSE_POSITIVES)
def test_equations_with_other_left_sides_are_not_equal(gold, pred):
    config = VerifierConfig()
    assert judge(f"\\boxed{{{pred}}}", gold, config)[1:] == (pred, "not-equal")
    assert judge(f"\\boxed{{{gold}}}", pred, config)[1:] == (gold, "not-equal")  # both directions
    assert not verify(parse(f"${gold}$"), parse(f"${pred}$"), timeout_seconds=None)


# (gold, prediction, expected): a left side is ignored only against a bare value, and equations with
# other left sides that describe the same solutions are still equal.
LEFT_SIDES: list[tuple[str, str, bool]] = [
    ("3", "x = 3", True),
    ("x = 3", "3", True),
    ("x = 3", "x = 3.0", True),
    ("x = 3", "2x = 6", True),  # the same solution set
    ("\\frac{1}{\\sqrt{6}}", "\\frac{NO}{BO}=\\frac{1}{\\sqrt{6}}", True),  # letters only: a name
    ("\\sin(x)=\\frac{42}{59}", "\\sin x=\\frac{42}{59}", True),
    ("x+y=1", "y+x=1", True),
    ("6", "2x=6", False),  # a left side with a number names nothing: not `6`
    ("7 = 11a+c", "11a+c", False),  # a gold equation stays one (Math-Verify's numina cases)
    ("\\frac{10}{9}", "\\frac{1}{2} = \\frac{10}{9}", True),  # a computation: its result (Math-Verify's numina cases)
    # A function in function notation and `y`, the usual name of its value, define the same function when
    # their right sides agree (issue 34); math-verify compares them as different equations.
    ("f(x) = 2x+3", "y = 2x + 3", True),
    ("y = 2x + 3", "f(x) = 2x+3", True),
    ("f(x)=2x+3", "y=2x+4", False),
    ("f(x)=2x+3", "y=(x+1)^2-x^2+2", True),  # right sides compared as expressions
    ("y(x)=2x+3", "y=2x+3", True),  # the function's own name
    ("f(x)=2x+3", "f=2x+3", True),
    ("f(x) = 2x+3", "2x+3", True),  # against a bare value the left side is ignored, as for `x = 3`
    ("2x+3", "f(x) = 2x+3", True),
    ("f(x)=2x+3", "z=2x+3", False),  # only `y` names a function's value
    ("f(x)=2x+3", "g(x)=2x+3", False),
]


@pytest.mark.parametrize(("gold", "pred", "expected"), LEFT_SIDES)
def test_left_sides(gold, pred, expected):
    correct, _, reason = judge(f"\\boxed{{{pred}}}", gold, VerifierConfig())
    assert (correct, reason) == (expected, "equal" if expected else "not-equal")


# (gold, response, expected, extracted): a later box after a word of correction replaces the earlier
# one; joined boxes meet a single-valued gold by their last box, a list gold by the whole list.
SEVERAL_BOXES: list[tuple[str, str, bool, str]] = [
    ("42", "First guess \\boxed{7}, but actually \\boxed{42}", True, "42"),
    ("7", "First guess \\boxed{7}, but actually \\boxed{42}", False, "42"),
    ("7, 42", "First guess \\boxed{7}, but actually \\boxed{42}", False, "42"),
    ("42", "\\boxed{7}, wait, \\boxed{42}", True, "42"),
    ("42", "\\boxed{7} and \\boxed{42}", True, "42"),
    ("7, 42", "\\boxed{7} and \\boxed{42}", True, "7,42"),
    ("\\{7, 42\\}", "\\boxed{42} or \\boxed{7}", True, "42,7"),
    ("7, 42", "\\boxed{42}", False, "42"),
]


@pytest.mark.parametrize(("gold", "response", "expected", "extracted"), SEVERAL_BOXES)
def test_several_boxes(gold, response, expected, extracted):
    correct, found, _ = judge(response, gold, VerifierConfig())
    assert (correct, found) == (expected, extracted)


# (gold, prediction, expected): the exact side of an approximation counts; a gold that is only an
# approximation accepts a value that rounds to it at its own number of decimals.
APPROXIMATIONS: list[tuple[str, str, bool]] = [
    ("\\frac13", "\\frac13 \\approx 0.33", True),
    ("\\frac13", "x = \\frac13 \\approx 0.33", True),
    ("0.33", "\\frac13 \\approx 0.33", False),  # the exact value is not 0.33
    ("\\frac13 \\approx 0.33", "\\frac{1}{3}", True),
    ("\\approx 0.33", "\\frac{1}{3}", True),
    ("\\approx 0.33", "0.334", True),
    ("\\approx 0.33", "0.3", False),
    ("\\approx 0.33", "0.34", False),
    ("\\approx 2.24", "\\sqrt{5}", True),
    ("\\approx 2.24", "\\sqrt{6}", False),
    ("x \\approx -1.5", "-\\frac{3}{2}", True),
    ("\\pi", "\\pi \\approx 3.14", True),
    ("\\frac13", "\\approx 0.33", False),  # an approximation alone meets the exact rounding rule
]


@pytest.mark.parametrize(("gold", "pred", "expected"), APPROXIMATIONS)
def test_approximations(gold, pred, expected):
    correct, _, reason = judge(f"\\boxed{{{pred}}}", gold, VerifierConfig())
    assert (correct, reason) == (expected, "equal" if expected else "not-equal")


@pytest.mark.parametrize(
    ("gold", "pred", "expected"),
    [
        ("7, -2, -5", "7, -2, \\text{ and } -5", True),
        ("\\{-5, -2, 7\\}", "7, -2, \\text{ and } -5", True),
        ("7, -2, -5", "7, -2, and -5", True),
        ("7, -2, -5", "7, -2, \\text{ and } -6", False),
        ("5\\", "5", True),  # a stray trailing backslash in a gold
        ("5\\", "6", False),
        ("\\frac{1}{2}\\", "0.5", True),
    ],
)
def test_lists_with_words_and_stray_backslashes(gold, pred, expected):
    correct, _, reason = judge(f"\\boxed{{{pred}}}", gold, VerifierConfig())
    assert (correct, reason) == (expected, "equal" if expected else "not-equal")
