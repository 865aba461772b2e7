"""The strict answer format (`answer_format="boxed"`): what passes is what verl's MATH scorer scores 1.0.

verl is not installed here, so its behaviour is pinned by facts: the hendrycks `strip_string` rewriting
that verl's `math_reward.py` and open-instruct's `math_utils.py` share (open-instruct's own test table,
allenai/open-instruct open_instruct/test_math_utils.py), and how its `last_boxed_only_string` /
`remove_boxed` read a response.
"""

from __future__ import annotations

import pytest

from rlep.tasks.settings.verifier import VerifierConfig
from rlep.verifiers import verify_batch
from rlep.verifiers.judge import judge
from rlep.verifiers.strict import verl_boxed_answer, verl_equivalent, verl_rewrite

STRICT = VerifierConfig(answer_format="boxed")


@pytest.mark.parametrize(
    ("text", "rewritten"),
    [
        # allenai/open-instruct open_instruct/test_math_utils.py (TestStripString)
        ("\\frac{1}{2}", "\\frac{1}{2}"),
        ("\\frac 1 2", "\\frac{1}{2}"),
        ("  \\frac{1}{2}  ", "\\frac{1}{2}"),
        ("\\left(\\frac{1}{2}\\right)", "(\\frac{1}{2})"),
        ("50\\%", "50"),
        ("0.5", "\\frac{1}{2}"),
        ("\\tfrac{3}{4}", "\\frac{3}{4}"),
        ("\\sqrt2", "\\sqrt{2}"),
        ("1 + 2", "1+2"),
        # the other steps of the same rewriting
        ("k = 3", "3"),
        ("xy=3", "3"),
        ("xy = 3", "xy=3"),  # only a left side of two characters or fewer (spaces count) is dropped
        ("5\\text{ cm}", "5"),
        ("30^\\circ", "30"),
        ("\\$12", "12"),
        (".25", "0.25"),
        (".5", "\\frac{1}{2}"),
        ("3/4", "\\frac{3}{4}"),
        ("03/4", "03/4"),
        ("\\frac1{72}", "\\frac{1}{72}"),
        ("\\dfrac{3}{4}", "\\frac{3}{4}"),
    ],
)
def test_verl_rewrite(text, rewritten):
    assert verl_rewrite(text) == rewritten


@pytest.mark.parametrize(
    ("answer", "gold", "expected"),
    [
        ("\\frac12", "0.5", True),
        ("1/2", "\\frac{1}{2}", True),
        ("0.75", "\\frac{3}{4}", False),  # verl compares strings: right, but scored 0 there
        ("2\\text{ m}\\text{ s}", "2\\text{ m}\\text{ s}", True),  # its rewriting fails: raw strings compared
        ("\\sqrt", "\\sqrt", True),
        ("\\frac", "2", False),
    ],
)
def test_verl_equivalent(answer, gold, expected):
    assert verl_equivalent(answer, gold) is expected


@pytest.mark.parametrize(
    ("response", "answer"),
    [
        ("so \\boxed{6}", "6"),
        ("6}", None),  # the tiny model's answer with no box
        ("\\fbox{6}", None),  # found by verl, then refused by remove_boxed
        ("\\boxed{6", None),  # never closed
        ("\\boxed{1} and \\boxed{2}", "2"),  # the last box only, never a joined list
        ("<think>\\boxed{5}</think> so 6", "5"),  # no </think> cut
        ("\\boxed{\\boxed{5}}", "5"),
        ("\\boxed 7$ and \\boxed{8}", "7"),  # `\boxed ` (a space) anywhere wins, up to the next `$`
        ("\\boxed{\\frac{1}{2}} done", "\\frac{1}{2}"),
        ("Answer: 6", None),
    ],
)
def test_verl_boxed_answer(response, answer):
    assert verl_boxed_answer(response) == answer


@pytest.mark.parametrize(
    ("response", "gold", "any_format", "boxed"),
    [
        ("6}", "6", "equal", "no-answer"),
        ("The answer is 6", "6", "equal", "no-answer"),
        ("$6$", "6", "equal", "no-answer"),
        ("\\fbox{6}", "6", "equal", "no-answer"),
        ("\\boxed{6}", "6", "equal", "equal"),
        ("\\boxed{6}}", "6", "equal", "equal"),
        ("\\boxed{7}", "6", "not-equal", "not-equal"),
        ("\\boxed{0.75}", "\\frac{3}{4}", "equal", "not-equal"),  # right, but verl gives 0
        ("\\boxed{\\frac34}", "\\frac{3}{4}", "equal", "equal"),
        ("\\boxed{0.5}", "\\frac{1}{2}", "equal", "equal"),
        ("\\boxed{k = 3}", "3", "equal", "equal"),
        ("\\boxed{5\\text{ cm}}", "5", "equal", "equal"),
        ("\\boxed{1} and \\boxed{2}", "1,2", "equal", "not-equal"),
        ("<think>\\boxed{5}</think> \\boxed{6}", "6", "equal", "equal"),
        ("\\boxed{6} but I am unsure, maybe 7", "6", "equal", "equal"),  # later prose is no answer in either
        ("\\boxed{3,6}", "6", "not-equal", "not-equal"),
    ],
)
def test_strict_mode_verdicts(response, gold, any_format, boxed):
    assert judge(response, gold, VerifierConfig())[2] == any_format
    assert judge(response, gold, STRICT)[2] == boxed


def test_strict_mode_through_the_pool():
    verdicts = verify_batch(["6}", "\\boxed{6}"], ["6", "6"], answer_format="boxed")
    assert [v.reason for v in verdicts] == ["no-answer", "equal"]


def test_answer_format_is_checked():
    with pytest.raises(ValueError, match="answer_format"):
        VerifierConfig(answer_format="verl")
