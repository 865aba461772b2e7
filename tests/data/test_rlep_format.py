import json
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import judged_row

from rlep.data.pool import build_pool
from rlep.data.problem import Problem
from rlep.data.rlep_format import RLEP_SCHEMA, export_pool
from rlep.data.rlep_import import IMPORT_DEFAULTS, import_pool
from rlep.data.store import ExperienceStore, StoreError
from rlep.data.trajectory import TRAJECTORY_SCHEMA, trajectory_row

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
        problem = Problem(
            id=problem_id, problem=f"text of {problem_id}", answer=gold, data_source="tiny-math/mix", level=level
        )
        for index, (ok, response) in enumerate(answers):
            rows.append(
                trajectory_row(
                    problem,
                    f"Q: text of {problem_id}\nA: ",
                    response=response,
                    response_token_ids=[3, 4],
                    behaviour_logprobs=[-0.1, -0.2],
                    finish_reason="stop",
                    correct=ok,
                    extracted_answer=gold if ok else None,
                    verdict_reason="equal" if ok else "not-equal",
                    reward=float(ok),
                    run_id="run-r",
                    policy_version=5,
                    model="tiny",
                    sampling={"n": 4},
                    sample_index=index,
                    created_at=WHEN,
                )
            )
    store.write_shard(0, rows)
    stats = build_pool(store, min_correct=1, dedupe=True)
    assert (stats.pool_rows, stats.pool_problems) == (3, 2)  # q1's whitespace repeat dropped
    return store.pool_path


def test_export_writes_one_verl_row_per_problem_with_candidates(tmp_path):
    report = export_pool(_pool(tmp_path), tmp_path / "rlep.parquet")
    assert (report.rows, report.candidates, report.data_sources) == (2, 3, {"tiny-math/mix": "lighteval/MATH"})
    table = pq.read_table(report.path)
    assert table.schema == RLEP_SCHEMA
    assert table.column_names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    assert table.to_pylist() == [
        {
            "data_source": "lighteval/MATH",  # a scorer verl knows, reading \boxed{} answers
            "prompt": [{"role": "user", "content": "text of q1"}],  # the raw question: verl adds the chat template
            "ability": "math",
            "reward_model": {
                "style": "rule",
                "ground_truth": "3/4",
                "candidates": ["1/2+1/4 = \\boxed{3/4}", "\\boxed{0.75}"],
            },
            "extra_info": {
                "index": 0,
                "problem_id": "q1",
                "problem": "text of q1",
                "level": 2,
                "rlep_data_source": "tiny-math/mix",
            },
        },
        {
            "data_source": "lighteval/MATH",
            "prompt": [{"role": "user", "content": "text of q2"}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": "12", "candidates": ["x = \\boxed{12}"]},
            "extra_info": {
                "index": 1,
                "problem_id": "q2",
                "problem": "text of q2",
                "level": 3,
                "rlep_data_source": "tiny-math/mix",
            },
        },
    ]


def test_export_reads_like_rleps_dataset_does(tmp_path, monkeypatch):
    # RLEP's RLHFDataset loads with `datasets` and reads row["reward_model"]["candidates"] and the chat.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    import datasets

    out = export_pool(_pool(tmp_path), tmp_path / "rlep.parquet").path
    loaded = datasets.load_dataset("parquet", data_files=str(out), cache_dir=str(tmp_path / "hf"))["train"]
    row = loaded[0]
    assert row["reward_model"]["candidates"] == ["1/2+1/4 = \\boxed{3/4}", "\\boxed{0.75}"]
    assert row["prompt"] == [{"role": "user", "content": "text of q1"}]
    assert row["extra_info"]["index"] == 0


def test_export_import_export_round_trips(tmp_path):
    pool_path = _pool(tmp_path)
    # `rendered` keeps the prompt the answers were sampled from, so nothing of the pool's problem is lost.
    first = export_pool(pool_path, tmp_path / "first.parquet", prompt="rendered").path
    imported = import_pool(first, tmp_path / "imported.parquet", run_id="from-rlep", created_at=WHEN).path
    second = export_pool(imported, tmp_path / "second.parquet", prompt="rendered").path
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
        {
            "data_source": "math_dapo",
            "prompt": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Solve 2x=68. Answer: $Answer"},
            ],
            "ability": "MATH",
            "reward_model": {
                "ground_truth": "34",
                "style": "rule-lighteval/MATH_v2",
                "candidates": ["x = 34\nAnswer: 34", "Answer: 34"],
            },
            "extra_info": {"index": "9a3e-uuid"},
        },
        {
            "data_source": "math_dapo",
            "prompt": [{"role": "user", "content": "Unsolved one"}],
            "ability": "MATH",
            "reward_model": {"ground_truth": "7", "style": "rule-lighteval/MATH_v2", "candidates": None},
            "extra_info": {"index": "77b1-uuid"},
        },
    ]
    source = tmp_path / "dapo-with-pool.parquet"
    pq.write_table(pa.Table.from_pylist(rows), source)
    table = pq.read_table(import_pool(source, tmp_path / "ours.parquet", created_at=WHEN).path)
    assert table.select(
        ["problem_id", "prompt", "problem", "level", "gold_answer", "response", "model"]
    ).to_pylist() == [
        {
            "problem_id": "9a3e-uuid",
            "prompt": "Solve 2x=68. Answer: $Answer",
            "problem": "Solve 2x=68. Answer: $Answer",
            "level": 0,
            "gold_answer": "34",
            "response": "x = 34\nAnswer: 34",
            "model": "imported",
        },
        {
            "problem_id": "9a3e-uuid",
            "prompt": "Solve 2x=68. Answer: $Answer",
            "problem": "Solve 2x=68. Answer: $Answer",
            "level": 0,
            "gold_answer": "34",
            "response": "Answer: 34",
            "model": "imported",
        },
    ]  # the unsolved problem has no candidates, so no rows


def test_import_numbers_rows_without_ids_and_spells_non_text_answers(tmp_path):
    source = tmp_path / "plain.parquet"
    pq.write_table(
        pa.Table.from_pylist(
            [
                {
                    "data_source": "d",
                    "prompt": "plain text prompt",
                    "reward_model": {"ground_truth": ["1", "2"], "candidates": ["a"]},
                },
                {"data_source": "d", "prompt": "another", "reward_model": {"ground_truth": ["3"], "candidates": ["b"]}},
            ]
        ),
        source,
    )
    table = pq.read_table(import_pool(source, tmp_path / "ours.parquet").path)
    assert table.select(["problem_id", "prompt", "gold_answer"]).to_pylist() == [
        {"problem_id": "0", "prompt": "plain text prompt", "gold_answer": json.dumps(["1", "2"])},
        {"problem_id": "1", "prompt": "another", "gold_answer": '["3"]'},
    ]


def test_bad_inputs_are_named(tmp_path):
    missing = tmp_path / "no-reward.parquet"
    pq.write_table(pa.table({"data_source": ["d"], "prompt": ["p"]}), missing)
    with pytest.raises(
        StoreError, match=r"no-reward\.parquet: not an RLEP/verl file \(missing columns \['reward_model'\]\)"
    ):
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
    build_pool(store)
    with pytest.raises(StoreError, match="problem 'q1' of 'tiny-math/mix' has two gold answers"):
        export_pool(store.pool_path, tmp_path / "out.parquet")


# ---------------------------------------------------------------- replicas of the field's files
# Built the way the source projects build them: verl's examples/data_preprocess/gsm8k.py and math_dataset.py
# (`datasets` map with indices, the raw columns popped), and RLEP's released file (DAPO-Math-17k rows, a
# string uuid index, `reward_model.candidates`).


def _hf(tmp_path):
    import datasets

    return datasets


def _gsm8k_replica(tmp_path):
    datasets = _hf(tmp_path)
    raw = datasets.Dataset.from_dict(
        {
            "question": [
                "Ann has 1,000 coins and spends 3. How many are left?",
                "What is 6 times 7?",
                "What is 10 minus 4?",
            ],
            "answer": ["1000-3=997\n#### 997", "6*7=42\n#### 42", "10-4=6\n#### 6"],
        }
    )
    instruction = 'Let\'s think step by step and output the final answer after "####".'

    def process(example, idx):
        question_raw, answer_raw = example.pop("question"), example.pop("answer")
        return {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": question_raw + " " + instruction}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": answer_raw.split("#### ")[1].replace(",", "")},
            "extra_info": {"split": "train", "index": idx, "answer": answer_raw, "question": question_raw},
        }

    path = tmp_path / "gsm8k" / "train.parquet"
    raw.map(process, with_indices=True).to_parquet(str(path))
    return path


def _math_replica(tmp_path):
    datasets = _hf(tmp_path)
    raw = datasets.Dataset.from_dict(
        {
            "problem": ["Compute $1/2+1/4$.", "Solve $x+1=7$.", "What is $3^2$?"],
            "solution": ["It is $\\boxed{\\frac{3}{4}}$.", "So $x=\\boxed{6}$.", "$3^2=\\boxed{9}$."],
            "level": ["Level 2", "Level 1", "Level 1"],
            "type": ["Algebra", "Algebra", "Prealgebra"],
        }
    )
    instruction = "Let's think step by step and output the final answer within \\boxed{}."

    def process(example, idx):
        question, answer = example.pop("problem"), example.pop("solution")
        gold = answer[answer.rindex("\\boxed{") + 7 : answer.rindex("}")]
        return {
            "data_source": "DigitalLearningGmbH/MATH-lighteval",
            "prompt": [{"role": "user", "content": question + " " + instruction}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": gold},
            "extra_info": {"split": "train", "index": idx},
        }

    path = tmp_path / "math" / "train.parquet"
    raw.map(process, with_indices=True).to_parquet(str(path))
    return path


def _pool_of(tmp_path, problems, answers):
    """A collection's pool over `problems`: `answers[i]` are problem i's correct-judged responses."""

    store = ExperienceStore(tmp_path / "run", run_id="run-v").prepare()
    rows = [
        judged_row(p, text, run_id="run-v", model="tiny", sample_index=j, created_at=WHEN)
        for p, texts in zip(problems, answers)
        for j, text in enumerate(texts)
    ]
    store.write_shard(0, rows)
    build_pool(store, min_correct=1)
    return store.pool_path


def _read_back_like_verl(datasets, *files):
    """verl's RLHFDataset: each file through load_dataset("parquet"), then concatenate_datasets."""
    cache = str(Path(files[0]).parent / "hf-cache")
    return datasets.concatenate_datasets(
        [datasets.load_dataset("parquet", data_files=str(f), cache_dir=cache)["train"] for f in files]
    )


@pytest.mark.parametrize("replica, scorer", [(_gsm8k_replica, "lighteval/MATH"), (_math_replica, None)])
def test_a_verl_file_read_exported_into_and_read_back_as_verl_reads_it(tmp_path, replica, scorer):
    from rlep.data.sources import load_problems
    from rlep.tasks.settings.source import problem_source

    train = replica(tmp_path)
    datasets = _hf(tmp_path)
    problems = load_problems(problem_source(source=str(train)))
    assert [p.id for p in problems] == ["0", "1", "2"]
    # Problem 0 solved twice (one answer only a lenient pass: `6}`-style stray brace), problem 1 once, 2 never.
    pool = _pool_of(
        tmp_path,
        problems[:2],
        [[f"\\boxed{{{problems[0].answer}}}", f"{problems[0].answer}}}"], [f"so \\boxed{{{problems[1].answer}}}"]],
    )
    report = export_pool(pool, tmp_path / "with-pool.parquet", into=train, data_source=scorer, strict=True)
    assert (report.rows, report.rows_with_candidates, report.candidates, report.strict_dropped) == (3, 2, 2, 1)
    assert report.unmatched_pool_problems == 0

    original, exported = pq.read_table(train), pq.read_table(report.path)
    assert exported.schema.field("extra_info").type == original.schema.field("extra_info").type  # index stays int64
    both = _read_back_like_verl(datasets, train, report.path)  # RLEP's recipe: the original and the pool's rows
    assert len(both) == 6 and both[0]["reward_model"]["candidates"] is None
    rows = exported.to_pylist()
    assert [r["reward_model"]["candidates"] for r in rows] == [
        [f"\\boxed{{{problems[0].answer}}}"],
        [f"so \\boxed{{{problems[1].answer}}}"],
        [],
    ]  # unsolved row kept
    for before, after in zip(original.to_pylist(), rows):
        assert after["data_source"] == (scorer or before["data_source"])
        assert after["extra_info"] == before["extra_info"] and after["prompt"] == before["prompt"]
        assert {k: after["reward_model"][k] for k in ("style", "ground_truth")} == before["reward_model"]
        assert after["ability"] == before["ability"]

    # Imported back against the training problems: every problem found by its index, and the export repeats.
    back = import_pool(report.path, tmp_path / "imported", problems=problems)
    assert (back.matched_by_id, back.matched_by_text, back.unmatched, back.match_rate) == (2, 0, 0, 1.0)
    again = export_pool(back.path, tmp_path / "again.parquet", into=train, data_source=scorer)
    assert pq.read_table(again.path).equals(exported)


def test_an_rlep_pool_file_imports_onto_problems_that_share_only_the_text(tmp_path):
    datasets = _hf(tmp_path)
    instruction = 'Solve the following math problem step by step.\n\n{}\n\nRemember to put your answer after "Answer:".'
    questions = ["Solve 2x=68.", "What is 5+5?", "How many primes are below 10?"]
    dapo = [
        {
            "data_source": "math_dapo",
            "prompt": [{"role": "user", "content": instruction.format(q)}],
            "ability": "MATH",
            "reward_model": {"ground_truth": gold, "style": "rule-lighteval/MATH_v2"},
            "extra_info": {"index": uid},
        }
        for q, gold, uid in zip(questions, ["34", "10", "4"], ["9a3e-uuid", "77b1-uuid", "c0de-uuid"])
    ]
    train = tmp_path / "dapo-math-17k.parquet"
    datasets.Dataset.from_list(dapo).to_parquet(str(train))
    with_pool = [
        dict(r, reward_model=dict(r["reward_model"], candidates=c))
        for r, c in zip(dapo, [["Answer: 34"], None, ["Answer: 4", "4\nAnswer: 4"]])
    ]
    released = tmp_path / "dapo-with-experience-pool.parquet"
    datasets.Dataset.from_list(with_pool).to_parquet(str(released))

    # The README's GPU example source: `prompt` / `solution` columns, ids `<stem>:<row>`, nothing shared but the text.
    local = tmp_path / "local.jsonl"
    local.write_text(
        "".join(
            json.dumps({"prompt": instruction.format(q), "solution": s}) + "\n"
            for q, s in zip(questions[::-1], ["\\boxed{4}", "\\boxed{10}", "\\boxed{34}"])
        )
    )
    from rlep.data.sources import load_problems
    from rlep.tasks.settings.source import problem_source

    problems = load_problems(
        problem_source(source=str(local), problem_column="prompt", answer_column="solution", answer_format="boxed")
    )
    report = import_pool(released, tmp_path / "pool", problems=problems)
    assert (report.rows, report.problems, report.skipped_rows) == (3, 2, 1)
    assert (report.matched_by_id, report.matched_by_text, report.unmatched, report.match_rate) == (0, 2, 0, 1.0)
    table = pq.read_table(report.path)
    assert set(zip(table["data_source"].to_pylist(), table["problem_id"].to_pylist())) == {
        ("local", "local:0"),
        ("local", "local:2"),
    }

    # And out again into DAPO's own file: its string index stays a string, the file concatenates with the original.
    out = export_pool(report.path, tmp_path / "out.parquet", into=train)
    assert out.unmatched_pool_problems == 0 and out.candidates == 3
    assert (
        pq.read_table(out.path).schema.field("extra_info").type == pq.read_table(train).schema.field("extra_info").type
    )
    assert len(_read_back_like_verl(datasets, train, out.path)) == 6
    # Under strict, `Answer:` lines cannot be vouched for by the boxed check: math_dapo reads another format.
    strict = export_pool(report.path, tmp_path / "strict.parquet", into=train, strict=True)
    assert (strict.candidates, strict.strict_other_format) == (0, 3)


def test_importing_a_file_without_candidates_writes_nothing(tmp_path):
    train = _math_replica(tmp_path)
    with pytest.raises(StoreError, match=r"none of its 3 rows has reward_model.candidates"):
        import_pool(train, tmp_path / "pool" / "pool.parquet")
    assert not (tmp_path / "pool").exists()


def test_export_refuses_a_scorer_verl_does_not_have(tmp_path):
    with pytest.raises(StoreError, match="'tiny-math/mix': verl's default_compute_score has no scorer"):
        export_pool(_pool(tmp_path), tmp_path / "o.parquet", data_source="tiny-math/mix")
