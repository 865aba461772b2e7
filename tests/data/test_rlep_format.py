import json
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data.problem import Problem
from data.rlep_format import IMPORT_DEFAULTS, RLEP_SCHEMA, export_pool, import_pool
from data.store import ExperienceStore, StoreError
from data.trajectory import TRAJECTORY_SCHEMA, trajectory_row

WHEN = datetime(2025, 7, 1, tzinfo=timezone.utc)
# problem id -> (level, [(correct, response), ...]); q0 has no correct answer and stays out of the pool
ANSWERS = {
    "q0": (1, [(False, "I think 5"), (False, "6")]),
    "q1": (2, [(True, "1/2+1/4 = \\boxed{3/4}"), (True, "\\boxed{0.75}"), (True, "1/2+1/4 =  \\boxed{3/4}")]),
    "q2": (3, [(False, "7"), (True, "x = \\boxed{12}")]),
}


def _pool(tmp_path):
    store = ExperienceStore(tmp_path / "run", run_id="run-r").prepare()
    rows = []
    for problem_id, (level, answers) in ANSWERS.items():
        gold = {"q0": "4", "q1": "3/4", "q2": "12"}[problem_id]
        problem = Problem(id=problem_id, problem=f"text of {problem_id}", answer=gold, data_source="tiny-math/mix",
                          level=level)
        for index, (ok, response) in enumerate(answers):
            rows.append(trajectory_row(
                problem, f"Q: text of {problem_id}\nA: ", response=response, response_token_ids=[3, 4],
                behaviour_logprobs=[-0.1, -0.2], finish_reason="stop", correct=ok, extracted_answer=gold if ok else None,
                verdict_reason="equal" if ok else "not-equal", reward=float(ok), run_id="run-r", policy_version=5,
                model="tiny", sampling={"n": 4}, sample_index=index, created_at=WHEN,
            ))  # fmt: skip
    store.write_shard(0, rows)
    stats = store.build_pool(min_correct=1)
    assert (stats.pool_rows, stats.pool_problems) == (3, 2)  # q1's whitespace repeat dropped
    return store.pool_path


def test_export_writes_one_verl_row_per_problem_with_candidates(tmp_path):
    out = export_pool(_pool(tmp_path), tmp_path / "rlep.parquet")
    table = pq.read_table(out)
    assert table.schema == RLEP_SCHEMA
    assert table.column_names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    assert table.to_pylist() == [
        {
            "data_source": "tiny-math/mix",
            "prompt": [{"role": "user", "content": "Q: text of q1\nA: "}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": "3/4",
                             "candidates": ["1/2+1/4 = \\boxed{3/4}", "\\boxed{0.75}"]},
            "extra_info": {"index": 0, "problem_id": "q1", "problem": "text of q1", "level": 2},
        },
        {
            "data_source": "tiny-math/mix",
            "prompt": [{"role": "user", "content": "Q: text of q2\nA: "}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": "12", "candidates": ["x = \\boxed{12}"]},
            "extra_info": {"index": 1, "problem_id": "q2", "problem": "text of q2", "level": 3},
        },
    ]


def test_export_reads_like_rleps_dataset_does(tmp_path, monkeypatch):
    # RLEP's RLHFDataset loads with `datasets` and reads row["reward_model"]["candidates"] and the chat.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    import datasets

    out = export_pool(_pool(tmp_path), tmp_path / "rlep.parquet")
    loaded = datasets.load_dataset("parquet", data_files=str(out), cache_dir=str(tmp_path / "hf"))["train"]
    row = loaded[0]
    assert row["reward_model"]["candidates"] == ["1/2+1/4 = \\boxed{3/4}", "\\boxed{0.75}"]
    assert row["prompt"] == [{"role": "user", "content": "Q: text of q1\nA: "}]
    assert row["extra_info"]["index"] == 0


def test_export_import_export_round_trips(tmp_path):
    pool_path = _pool(tmp_path)
    first = export_pool(pool_path, tmp_path / "first.parquet")
    imported = import_pool(first, tmp_path / "imported.parquet", run_id="from-rlep", created_at=WHEN)
    second = export_pool(imported, tmp_path / "second.parquet")
    assert pq.read_table(second).equals(pq.read_table(first))

    back = pq.read_table(imported)
    assert back.schema == TRAJECTORY_SCHEMA
    kept = ["problem_id", "data_source", "prompt", "problem", "level", "gold_answer", "response", "correct"]
    assert back.select(kept).to_pylist() == pq.read_table(pool_path).select(kept).to_pylist()
    assert back["sample_index"].to_pylist() == [0, 1, 0]  # position among the problem's candidates
    row = back.to_pylist()[0]
    assert {k: row[k] for k in IMPORT_DEFAULTS} == IMPORT_DEFAULTS
    assert (row["run_id"], row["created_at"], row["sampling"]) == ("from-rlep", WHEN, "{}")


def test_import_reads_a_dapo_style_file(tmp_path):
    # DAPO-Math-17k's layout: a uuid index in extra_info, no problem id or level, style rule-lighteval/MATH_v2.
    rows = [
        {"data_source": "math_dapo", "prompt": [{"role": "system", "content": "Be brief."},
                                                {"role": "user", "content": "Solve 2x=68. Answer: $Answer"}],
         "ability": "MATH", "reward_model": {"ground_truth": "34", "style": "rule-lighteval/MATH_v2",
                                             "candidates": ["x = 34\nAnswer: 34", "Answer: 34"]},
         "extra_info": {"index": "9a3e-uuid"}},
        {"data_source": "math_dapo", "prompt": [{"role": "user", "content": "Unsolved one"}], "ability": "MATH",
         "reward_model": {"ground_truth": "7", "style": "rule-lighteval/MATH_v2", "candidates": None},
         "extra_info": {"index": "77b1-uuid"}},
    ]
    source = tmp_path / "dapo-with-pool.parquet"
    pq.write_table(pa.Table.from_pylist(rows), source)
    table = pq.read_table(import_pool(source, tmp_path / "ours.parquet", created_at=WHEN))
    assert table.select(["problem_id", "prompt", "problem", "level", "gold_answer", "response", "model"]).to_pylist() == [
        {"problem_id": "9a3e-uuid", "prompt": "Solve 2x=68. Answer: $Answer", "problem": "Solve 2x=68. Answer: $Answer",
         "level": 0, "gold_answer": "34", "response": "x = 34\nAnswer: 34", "model": "imported"},
        {"problem_id": "9a3e-uuid", "prompt": "Solve 2x=68. Answer: $Answer", "problem": "Solve 2x=68. Answer: $Answer",
         "level": 0, "gold_answer": "34", "response": "Answer: 34", "model": "imported"},
    ]  # the unsolved problem has no candidates, so no rows


def test_import_numbers_rows_without_ids_and_spells_non_text_answers(tmp_path):
    source = tmp_path / "plain.parquet"
    pq.write_table(pa.Table.from_pylist([
        {"data_source": "d", "prompt": "plain text prompt", "reward_model": {"ground_truth": ["1", "2"], "candidates": ["a"]}},
        {"data_source": "d", "prompt": "another", "reward_model": {"ground_truth": ["3"], "candidates": ["b"]}},
    ]), source)  # fmt: skip
    table = pq.read_table(import_pool(source, tmp_path / "ours.parquet"))
    assert table.select(["problem_id", "prompt", "gold_answer"]).to_pylist() == [
        {"problem_id": "0", "prompt": "plain text prompt", "gold_answer": json.dumps(["1", "2"])},
        {"problem_id": "1", "prompt": "another", "gold_answer": '["3"]'},
    ]


def test_bad_inputs_are_named(tmp_path):
    missing = tmp_path / "no-reward.parquet"
    pq.write_table(pa.table({"data_source": ["d"], "prompt": ["p"]}), missing)
    with pytest.raises(StoreError, match=r"no-reward\.parquet: not an RLEP/verl file \(missing columns \['reward_model'\]\)"):
        import_pool(missing, tmp_path / "out.parquet")
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 not really")
    with pytest.raises(StoreError, match=r"broken\.parquet: unreadable Parquet file"):
        import_pool(broken, tmp_path / "out.parquet")
    with pytest.raises(ValueError, match="not a trajectory table"):
        export_pool(missing, tmp_path / "out.parquet")
    assert not (tmp_path / "out.parquet").exists()


def test_export_refuses_a_problem_with_two_gold_answers(tmp_path):
    store = ExperienceStore(tmp_path / "run").prepare()
    rows = [pq.read_table(_pool(tmp_path)).to_pylist()[0] for _ in range(2)]
    rows[1] = {**rows[1], "gold_answer": "0.75", "response": "other", "sample_index": 9}
    store.write_shard(0, rows)
    store.build_pool()
    with pytest.raises(StoreError, match="problem 'q1' of 'tiny-math/mix' has two gold answers"):
        export_pool(store.pool_path, tmp_path / "out.parquet")
