"""Gold answers and levels read by the conventions of the projects that wrote the data sets."""

import pytest

from rlep.data.gold_answers import difficulty_level, gsm8k_final_answer, last_boxed_answer


@pytest.mark.parametrize(
    ("solution", "expected"),
    [
        ("so $x = \\boxed{5}$.", "5"),
        # Several boxes: the last one, as verl's last_boxed_only_string (not a list of them all).
        ("The roots are $\\boxed{-3}$ and $\\boxed{3}$; the larger is $\\boxed{3}$.", "3"),
        ("First $\\boxed{7}$, then corrected: $\\boxed{42}$", "42"),
        ("nested $\\boxed{\\frac{1}{\\sqrt{2}}}$", "\\frac{1}{\\sqrt{2}}"),
        ("$\\boxed{(1, 2)}$ is the point", "(1, 2)"),
        ("MATH sometimes writes $\\fbox{9}$", "9"),
        ("the answer is $\\boxed 7$.", "7"),  # a box without braces runs to the end of the math span
        ("no box at all, the answer is 3", None),
        ("an unclosed $\\boxed{12$", None),
        ("an empty $\\boxed{}$", None),
    ],
)
def test_last_boxed_answer(solution, expected):
    assert last_boxed_answer(solution) == expected


@pytest.mark.parametrize(
    ("solution", "expected"),
    [
        ("48+24 = <<48+24=72>>72\n#### 72", "72"),
        ("16*100 = 1,600\n#### 1,600", "1600"),  # thousands commas removed, as verl's gsm8k.py
        ("#### 1,234,567.5", "1234567.5"),
        ("#### -7", "-7"),
        ("#### 1/2", "1/2"),  # not a number verl's pattern reads whole: kept whole rather than cut to 1
        ("#### 3, 4", "3, 4"),  # a list, not a thousands separator
        ("there is no marker here", None),
        ("####   \nnothing after it", None),
    ],
)
def test_gsm8k_final_answer(solution, expected):
    assert gsm8k_final_answer(solution) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Level 3", 3),
        ("level 5", 5),
        ("Level ?", 0),
        ("3", 3),
        (2, 2),
        (4.0, 4),
        (-1, 0),
        (None, 0),
        ("hard", 0),
        (True, 0),
    ],
)
def test_difficulty_level(value, expected):
    assert difficulty_level(value) == expected
