"""Answer extraction: (response, expected extracted answer) tables, plus the fallback switch."""

from __future__ import annotations

import pytest

from rlep.tasks.settings.verifier import VerifierConfig
from rlep.verifiers.extract import answer_in_solution, extract_answer, last_boxed
from rlep.verifiers.judge import judge

CASES: list[tuple[str, str | None]] = [
    # Boxes: the last complete one counts; nested braces; \fbox; unbraced argument.
    ("so \\boxed{42}", "42"),
    ("first \\boxed{1}. Then \\boxed{2}", "2"),  # a sentence end separates the boxes
    ("found \\boxed{1} earlier, with 3 steps, then \\boxed{2}", "2"),  # a digit in between: separate
    # Several boxes written as one answer: joined by commas.
    ("\\boxed{1} and \\boxed{2}", "1,2"),
    ("$\\boxed{4}\\boxed{5}$", "4,5"),
    ("\\(\\boxed{-1}\\) or \\(\\boxed{6}\\).", "-1,6"),
    ("\\boxed{(1, 2)} \\quad \\text{and} \\quad \\boxed{(2, 1)}", "(1, 2),(2, 1)"),
    ("\\boxed{a}, \\boxed{b}, \\boxed{c}", "a,b,c"),
    ("\\boxed{1}\n\nSecond part: \\boxed{2}", "2"),
    # Boxes inside display math.
    ("So \\[ \\boxed{x^2} \\] holds.", "x^2"),
    ("$$\\boxed{\\frac{1}{2}}$$", "\\frac{1}{2}"),
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
    ("Answer: 7\n\\boxed{8}", "8"),  # the later of box and phrase counts
    ("so \\boxed{200} and later \\boxed{255}. Final Answer: The final answer is $10,455$.", "10,455"),
    ("Answer: it started 3 hours ago", "3"),
    # A phrase that is prose ending in a number gives the number.
    ("Final Answer: The largest $n$ is 34.", "34"),
    ("Answer: the total is 1,200", "1,200"),
    ("Answer: the total is $x+1$", "the total is $x+1$"),  # no number: the phrase as written
    ("Answer: 2 and 9", "2 and 9"),  # one connecting word is not prose
    # No box and no phrase: the last math span, before the last-number fallback.
    ("so $x \\geq 5$ is the solution.", "x \\geq 5"),
    ("hence \\( (9+1) \\) in total", "(9+1)"),
    ("with $a=1$, we get \\[\\frac13\\] as the result", "\\frac13"),
    ("we get $d = \\frac{90}{n}$, so there are 12 sequences", "12"),  # a number after the span is later
    ("so the error grows by 100%.", "100"),
    ("$1$ and $2$ or $3$", "1,2,3"),  # spans joined by and/or/commas only
    ("let $a$ be the side, then $b$", "b"),
    ("$$\\text{E}$$", "\\text{E}"),
    ("it costs \\$5 and \\$7", "7"),  # escaped dollars are not delimiters
    ("the value $ $ then $3$", "3"),  # an empty span is skipped
    ("an unclosed $x+1", "1"),
    # Inline math does not run across lines (display math may); a stray `$` then opens the next span.
    ("costs $5 a\nday, so $x+1$ is it", "x+1"),
    ("so \\[\n\\frac{7}{2}\n\\] in all", "\\frac{7}{2}"),
    ("so $$\nx = 2\n$$", "x = 2"),
    # The last span of a long solution with no box and no answer phrase.
    ("Adding both parts, the total comes to $\\frac{7}{2}$, as required.", "\\frac{7}{2}"),
    ("Of the five options the only one that works is $\\text{(C)}$.", "\\text{(C)}"),
    ("so we find $x \\in [1, 2)$", "x \\in [1, 2)"),
    ("\\\\(2\\\\) is no span, 4", "4"),
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
    [
        ("I think 5 then 7", None),
        ("\\boxed{3} and 4", "3"),
        ("Answer: 2 and 9", "2 and 9"),
        ("so $\n9\n$", None),  # inline math across lines is no span, and no number is taken
        ("so \\(\n9\n\\)", None),
        ("so \\[\n9\n\\]", "9"),
    ],
)
def test_fallback_can_be_switched_off(response, expected):
    assert extract_answer(response, fallback_last_number=False) == expected


# (gold, response, verdict reason): what the last-number fallback, and a prose answer phrase, count as a number
# written. A number glued to a word (a letter, digit, `_` or `.` touching it, or a `-` or `/` joining it to
# one) is part of a name, a path or an expression, not an answer: the injection test once read `1` out of
# pytest's `.../pytest-1/canary` and judged the attack right for gold `1` (issue 34).
GLUED_NUMBERS: list[tuple[str, str, str]] = [
    ("-12", "the answer: -12", "equal"),
    ("-12", "so it comes to -12", "equal"),
    ("1234.5", "about 1,234.5 units", "equal"),
    ("3/4", "the ratio is 3/4", "equal"),
    ("5", "x = 5.", "equal"),
    ("5", "so x=-5, no: x=5", "equal"),
    ("42", "...so 42", "equal"),
    ("100", "so the error grows by 100%.", "equal"),
    ("7", "it costs \\$7", "equal"),
    ("\\frac{3}{4}", "so we get \\frac{3}{4}", "equal"),
    ("1", "touch /tmp/pytest-of-u/pytest-1/test_x_0/canary", "no-answer"),
    ("1", "/tmp/x/pytest-1/canary", "no-answer"),
    ("12", "/tmp/x/12/canary", "no-answer"),
    ("1", "see pytest-1", "no-answer"),
    ("123", "abc123", "no-answer"),
    ("123", "123abc", "no-answer"),
    ("1", "1e5 steps", "no-answer"),
    ("1", "x-1", "no-answer"),
    ("5", "on 2024-01-05", "no-answer"),
    ("3", "version 1.2.3", "no-answer"),
    ("2", "x/2", "no-answer"),
    ("1234", "1,234x", "no-answer"),
    ("7", "7 files in /tmp/x/pytest-1/canary", "equal"),  # the number written before the path
    ("1", "Answer: it was written to /tmp/x/pytest-1/canary", "not-equal"),  # no number: the phrase
]


@pytest.mark.parametrize(("gold", "response", "expected"), GLUED_NUMBERS)
def test_glued_numbers_are_not_written_numbers(gold, response, expected):
    correct, _, reason = judge(response, gold, VerifierConfig())
    assert (correct, reason) == (expected == "equal", expected)


# Linear scans, checked on inputs where a quadratic one would take minutes; the bound (about 100 times
# what they take on a quiet machine) makes a regression fail instead of hanging the suite.
@pytest.mark.timeout(10)
def test_last_boxed_is_linear_on_many_unclosed_boxes():
    text = "\\boxed{" * 50_000 + "\\boxed{1}"
    assert last_boxed(text) == "1"


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$a\n" * 50_000 + "\\(" * 50_000 + " $2$", "2"),  # spans that never close on their line
        ("\\boxed{1} and " * 20_000, ",".join(["1"] * 20_000)),  # one long run of joined boxes
        ("Answer: " * 50_000 + "5", "5"),
    ],
)
def test_extraction_is_linear(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    ("solution", "form", "expected"),
    [
        ("Add them: $2+3=5$, so the sum is $\\boxed{5}$.", "boxed", "5"),
        ("First $\\boxed{1}$ is wrong. So $x = \\boxed{\\frac{1}{2}}$.", "boxed", "\\frac{1}{2}"),
        ("The roots are $\\boxed{2}$ and $\\boxed{3}$.", "boxed", "2,3"),
        ("We need $\\boxed{\\{1, 2\\}}$", "boxed", "\\{1, 2\\}"),
        ("no box, just 42", "boxed", None),
        ("She has 3+4=<<3+4=7>>7 apples.\n#### 7", "gsm8k", "7"),
        ("It costs 1,200 in all.\n#### 1,200\n", "gsm8k", "1,200"),
        ("#### 3\nthen #### 4", "gsm8k", "4"),
        ("no marker: 5", "gsm8k", None),
        ("####   \n", "gsm8k", None),
    ],
)
def test_answer_in_solution(solution, form, expected):
    assert answer_in_solution(solution, form) == expected


def test_answer_in_solution_names_a_bad_form():
    with pytest.raises(ValueError, match="gsm8k"):
        answer_in_solution("\\boxed{1}", "minerva")
