"""The verifier on worked solutions (data/tiny_math_worked.py): it scores the final boxed answer after the steps.

The reward is an outcome reward: a wrong step under a right final line still scores right (the steps are
checked by `step_errors`, not by the verifier), and right steps under a wrong final line score wrong.
"""

from __future__ import annotations

from rlep.data.tiny_math import FAMILIES, LEVELS, generate
from rlep.data.tiny_math_worked import step_errors, styles_for, worked_solution
from rlep.verifiers import verify, verify_batch


def test_every_style_of_every_cell_scores_right():
    responses, golds = [], []
    for family in FAMILIES:
        for level in LEVELS:
            for problem in generate("test", 20, seed=1, families=[family], levels=[level]):
                for style in styles_for(family, level):
                    responses.append(worked_solution(problem, style))
                    golds.append(problem.answer)
    verdicts = verify_batch(responses, golds)
    wrong = [(r, g) for r, g, v in zip(responses, golds, verdicts) if not v.correct]
    assert not wrong, wrong[:3]


def test_a_wrong_step_with_a_right_looking_final_line_scores_right_but_is_caught_by_the_step_check():
    # tens column drops the carry (7+9=16) yet the last line boxes the right sum
    response = "ones: 7+5=12, carry 1\ntens: 7+9=16\nhundreds: 0+0+1=1\n\\boxed{172}"
    assert verify(response, "172").correct
    assert any("carry" in e for e in step_errors(response))
    # a partial sum is wrong (157 for 167), the final line is right
    response = "77+95=77+90+5=157+5=172\n\\boxed{172}"
    assert verify(response, "172").correct
    assert step_errors(response)


def test_right_steps_under_a_wrong_final_line_score_wrong():
    response = "tenths: 5+4=9\nones: 5+4=9\n\\boxed{9.8}"
    assert step_errors(response) == []
    verdict = verify(response, "9.9")
    assert not verdict.correct and verdict.reason != "no-answer"


def test_the_final_box_wins_over_numbers_in_the_steps():
    # the steps end on 99 (the scaled sum) and 9.9 appears only in the box
    assert verify("x10: 55+44=99\n\\boxed{9.9}", "9.9").correct
    assert not verify("x10: 55+44=99\n\\boxed{9.9}", "99").correct


def test_a_solution_cut_off_before_its_box_is_not_credited_with_an_intermediate_number():
    cut = "ones: 7+5=12, carry 1\ntens: 7+9+1=17, carry 1"  # max_tokens hit before the last line
    assert not verify(cut, "172").correct


def test_equivalent_final_forms_after_steps_score_right():
    steps = "1/4+2/4=4/16+8/16=12/16=6/8=3/4\n"
    for box in ("3/4", "\\frac{3}{4}", "0.75"):
        assert verify(steps + f"\\boxed{{{box}}}", "3/4").correct, box
