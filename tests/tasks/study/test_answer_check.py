import json
from types import SimpleNamespace

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from conftest import judged_row, write_rows

from rlep.data.problem import Problem
from rlep.data.run_layout import CollectRunLayout, TrainRunLayout
from rlep.tasks.plan import Run
from rlep.tasks.study.answer_check import accepted_answers, answer_check_markdown

SUM = Problem(id="add:11+24", problem="11+24=?", answer="35", data_source="tiny-math/add")


def _run(key, kind, out, arm=None, span=None):
    return Run(key=key, kind=kind, seed=0, arm=arm, config=SimpleNamespace(out=str(out)), span=span)


def test_every_runs_pool_rollouts_and_final_answers_are_read_for_answers_that_are_not_a_number(tmp_path):
    """The restated sum (docs/results.md) is found wherever a study's runs left it: a collection's pool, a
    training run's own rollouts, its final evaluation's answers; a run not finished has no final row."""
    collect = CollectRunLayout(tmp_path / "collect")
    collect.root.mkdir()
    wrong = judged_row(SUM, "So 36.", extracted_answer="36")  # a wrong number the verifier let through
    write_rows(collect.pool, [judged_row(SUM, "35", extracted_answer="35")] * 3 + [wrong])
    done = TrainRunLayout(tmp_path / "reuse")
    done.fresh.mkdir(parents=True)
    write_rows(done.fresh_part(1), [judged_row(SUM, "35", extracted_answer="35")])
    hack = judged_row(SUM, "The final answer is 11 + 24", extracted_answer="11 + 24")
    write_rows(done.fresh_part(2), [hack, judged_row(SUM, "11+24", False, extracted_answer="11+24")])
    done.final_eval.root.mkdir()
    samples = {"step": [2, 2], "problem_id": [SUM.id] * 2, "data_source": [SUM.data_source] * 2}
    samples |= {"response": ["11 + 24", "35"], "extracted_answer": ["11 + 24", "35"], "gold_answer": ["35"] * 2}
    pq.write_table(
        pa.table({**samples, "correct": [True, True], "verdict_reason": ["equal"] * 2}), done.final_eval.samples
    )
    unfinished = TrainRunLayout(tmp_path / "baseline")
    unfinished.fresh.mkdir(parents=True)
    write_rows(unfinished.fresh_part(1), [judged_row(SUM, "35", extracted_answer="35")])
    runs = [
        _run("collect/seed-0", "collect", collect.root),
        _run("reuse/seed-0", "train", done.root, arm="reuse"),
        _run("baseline/seed-0", "train", unfinished.root, arm="baseline"),
    ]
    checks = accepted_answers(runs)
    got = checks[["run", "answers", "correct", "not_literal", "other_value"]].to_records(index=False).tolist()
    assert got == [
        ("collect/seed-0", "pool", 4, 0, 1),
        ("reuse/seed-0", "trained rollouts", 2, 1, 0),
        ("reuse/seed-0", "final evaluation", 2, 1, 0),
        ("baseline/seed-0", "trained rollouts", 1, 0, 0),
    ]
    assert checks.share.tolist() == [0.0, 0.5, 0.5, 0.0]
    text = answer_check_markdown(checks)
    assert "| collect/seed-0 | pool | 4 | 0 | 0.0% | 1 |" in text
    assert "| reuse/seed-0 | trained rollouts | 2 | 1 | 50.0% | 0 |" in text
    assert "- collect/seed-0, pool, add:11+24 (another number): `36`; `35`; So 36." in text
    assert "- reuse/seed-0, trained rollouts, add:11+24: `11 + 24`; `35`; The final answer is 11 + 24" in text
    assert answer_check_markdown(checks.iloc[[3]]).endswith(
        "every accepted answer to a numeric gold is a plain number of the gold's value.\n"
    )
    assert answer_check_markdown(pd.DataFrame(columns=checks.columns)) == "No run has left answers yet.\n"


def test_a_living_arm_is_read_once_with_each_recollection_and_examples_are_capped_and_table_safe(tmp_path):
    hack = judged_row(SUM, "The | final answer is 11 + 24", extracted_answer="11 + 24")
    arm = TrainRunLayout(tmp_path / "living")
    arm.fresh.mkdir(parents=True)
    write_rows(arm.fresh_part(1), [hack, hack])
    again = CollectRunLayout(tmp_path / "recollect")
    again.root.mkdir()
    write_rows(again.pool, [judged_row(SUM, "35", extracted_answer="35")])
    runs = [  # the arm's first part stands for its run; its later part and re-collection share or add their files
        _run("living/seed-0", "train", arm.root, "living", span=(0, 2)),
        _run("living/seed-0/recollect-2", "recollect", again.root, "living", span=(2, 2)),
        _run("living/seed-0/steps-3-4", "train", arm.root, "living", span=(2, 4)),
    ]
    checks = accepted_answers(runs, examples=1)
    got = checks[["run", "answers", "correct", "not_literal"]].to_records(index=False).tolist()
    assert got == [("living/seed-0", "trained rollouts", 2, 2), ("living/seed-0/recollect-2", "pool", 1, 0)]
    assert len(json.loads(checks.examples.iloc[0])) == 1
    assert "add:11+24: `11 + 24`; `35`; The \\| final answer is 11 + 24" in answer_check_markdown(checks)
