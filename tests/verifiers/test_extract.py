"""Answer extraction: (response, expected extracted answer) tables, plus the fallback switch."""

from __future__ import annotations

import pytest

from verifiers.extract import extract_answer, last_boxed

CASES: list[tuple[str, str | None]] = [
    # Boxes: the last complete one counts; nested braces; \fbox; unbraced argument.
    ("so \\boxed{42}", "42"),
    ("first \\boxed{1} then \\boxed{2}", "2"),
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("\\boxed{\\frac{\\sqrt{2}}{2}} done", "\\frac{\\sqrt{2}}{2}"),
    ("\\fbox{7}", "7"),
    ("$\\boxed 5$", "5"),
    ("\\boxed{\\boxed{5}}", "5"),
    ("\\boxed{\\{1,2\\}}", "\\{1,2\\}"),
    ("\\boxed{ 3 }", "3"),
    ("\\boxed{}", ""),
    ("\\boxed{1} and then \\boxed{2", "1"),  # the unclosed box is skipped
    ("\\boxed{{{{1}", "1"),  # no complete box: falls back to the last number
    ("\\boxedsymbol{3} is 4", "4"),  # not a box command
    ("a \\\\{\\boxed{6}}", "6"),
    # </think>: only the text after the last closing tag is read.
    ("<think>\\boxed{1}</think> so \\boxed{2}", "2"),
    ("<think>maybe 3</think>The answer is 4.", "4"),
    ("<think>a</think><think>b \\boxed{9}</think> 8", "8"),
    ("<think>unfinished \\boxed{5}", "5"),
    # Answer phrases; the latest one wins.
    ("#### 72", "72"),
    ("blah\n#### 1,234", "1,234"),
    ("Answer: 12", "12"),
    ("**Answer:** 12", "12"),
    ("answer: $\\frac{1}{2}$ because", "\\frac{1}{2}"),
    ("The answer is 42.", "42"),
    ("The final answer is 3.5. I hope it is correct.", "3.5"),
    ("Final Answer: The final answer is $\\frac{3}{4}$. I hope it is correct.", "\\frac{3}{4}"),
    ("the answer is \\(x = 2\\)", "x = 2"),
    ("The answer is $\\$1,200$.", "\\$1,200"),
    ("So the answer is: 17 apples\nmore text", "17 apples"),
    ("The answer is 3. Wait, Answer: 5", "5"),
    ("Answer: 7\n\\boxed{8}", "8"),  # a box beats a phrase
    # Fallback: the last number.
    ("I think 5 then 7", "7"),
    ("costs -3 dollars", "-3"),
    ("about 1,234.5 units", "1,234.5"),
    ("ratio 3/4 in the end", "3/4"),
    ("so we get \\frac{2649}{100}", "\\frac{2649}{100}"),
    ("so we get -\\dfrac{3}{4} or 5", "5"),
    ("x2 y", None),
    ("no numbers here", None),
    ("", None),
    # Odd bytes.
    ("\\boxed{1\x002}", "12"),
    ("\x00\x00\\boxed{3}", "3"),
]


@pytest.mark.parametrize(("response", "expected"), CASES)
def test_extract_answer(response, expected):
    assert extract_answer(response) == expected


@pytest.mark.parametrize(
    ("response", "expected"),
    [("I think 5 then 7", None), ("\\boxed{3} and 4", "3"), ("Answer: 2 and 9", "2 and 9")],
)
def test_fallback_can_be_switched_off(response, expected):
    assert extract_answer(response, fallback_last_number=False) == expected


def test_last_boxed_is_linear_on_many_unclosed_boxes():
    # 50,000 unclosed boxes: a quadratic scan would take minutes.
    text = "\\boxed{" * 50_000 + "\\boxed{1}"
    assert last_boxed(text) == "1"
