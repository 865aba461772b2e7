"""Problem sources on exact replicas of the files users bring (tests/data/source_replicas.py)."""

import json

import pyarrow.parquet as pq
import pytest
from source_replicas import (
    DAPO_PREFIX,
    DAPO_ROWS,
    DAPO_SUFFIX,
    GSM8K_INSTRUCTION,
    GSM8K_ROWS,
    MATH_INSTRUCTION,
    MATH_ROWS,
    write_dapo_math_17k,
    write_deepscaler,
    write_hf_gsm8k_repo,
    write_math_lighteval,
    write_numina_1_5,
    write_verl_gsm8k,
    write_verl_math,
)

from rlep.data.sources import ProblemSourceError, load_problems, load_source, write_problems
from rlep.tasks.settings.source import problem_source


def _config(source, **kwargs):
    return problem_source(source=str(source), **kwargs)


def test_replicas_have_the_real_parquet_types(tmp_path):
    """The replicas carry the types the real files have, which the reader must handle."""
    gsm8k = pq.read_schema(write_verl_gsm8k(tmp_path / "train.parquet", "train"))
    assert str(gsm8k.field("prompt").type) == "list<element: struct<role: string, content: string>>"
    assert str(gsm8k.field("extra_info").type.field("index").type) == "int64"
    assert gsm8k.names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    math = pq.read_schema(write_verl_math(tmp_path / "math.parquet", "test"))
    assert math.names == ["level", "type", "data_source", "prompt", "ability", "reward_model", "extra_info"]
    dapo = pq.read_schema(write_dapo_math_17k(tmp_path / "dapo.parquet"))
    assert str(dapo.field("extra_info").type) == "struct<index: string>"


def test_verl_gsm8k_is_read_natively(tmp_path):
    path = write_verl_gsm8k(tmp_path / "train.parquet", "train")
    loaded = load_source(_config(path))
    assert (loaded.layout, loaded.split, loaded.split_column, loaded.rows, loaded.skipped) == (
        "verl",
        "train",
        "extra_info.split",
        3,
        {},
    )
    assert loaded.summary() == "3 rows of split 'train' (verl layout, split column extra_info.split)"
    first = loaded.problems[0]
    question = GSM8K_ROWS[0][0]
    assert first.problem == question + " " + GSM8K_INSTRUCTION  # the last user message, as verl prompts with it
    assert first.messages == ({"role": "user", "content": question + " " + GSM8K_INSTRUCTION},)
    assert [p.answer for p in loaded.problems] == [gold for _, _, gold in GSM8K_ROWS]
    assert [p.id for p in loaded.problems] == ["0", "1", "2"]
    assert {p.data_source for p in loaded.problems} == {"openai/gsm8k"}
    # What a writer needs to give the row back, with the file's own types (an int index here).
    assert first.extra == {
        "data_source": "openai/gsm8k",
        "ability": "math",
        "reward_style": "rule",
        "index": 0,
        "split": "train",
        "question": question,
    }


def test_verl_math_keeps_levels_and_the_boxed_gold(tmp_path):
    path = write_verl_math(tmp_path / "test.parquet", "test")
    problems = load_problems(_config(path, split="test"))
    assert [p.answer for p in problems] == [row["gold"] for row in MATH_ROWS]
    assert [p.level for p in problems] == [1, 3, 0]  # "Level 1", "Level 3", "Level ?"
    assert problems[1].problem == MATH_ROWS[1]["problem"] + " " + MATH_INSTRUCTION
    assert problems[0].extra["index"] == 0 and problems[0].extra["question"] is None


def test_dapo_math_17k_string_index(tmp_path):
    path = write_dapo_math_17k(tmp_path / "dapo-math-17k.parquet")
    loaded = load_source(_config(path))
    assert (loaded.layout, loaded.split, loaded.split_column) == ("verl", None, None)  # no split column: read whole
    assert [p.id for p in loaded.problems] == [uuid for _, _, uuid in DAPO_ROWS]
    assert [p.answer for p in loaded.problems] == [gold for _, gold, _ in DAPO_ROWS]
    assert loaded.problems[0].problem == DAPO_PREFIX + DAPO_ROWS[0][0] + DAPO_SUFFIX
    assert loaded.problems[0].extra == {
        "data_source": "math_dapo",
        "ability": "MATH",
        "reward_style": "rule-lighteval/MATH_v2",
        "index": DAPO_ROWS[0][2],
        "split": None,
        "question": None,
    }


def test_verl_split_is_applied_and_a_missing_split_refused(tmp_path):
    import datasets

    test_file = write_verl_gsm8k(tmp_path / "test.parquet", "test")
    assert len(load_problems(_config(test_file, split="test"))) == 3
    with pytest.raises(
        ProblemSourceError,
        match=r"test\.parquet: no rows of split 'train' in column 'extra_info.split' \(it holds: test\)",
    ):
        load_problems(_config(test_file))  # the default split is train
    # One file holding both splits (verl users concatenate them): the split chooses its rows.
    train_file = write_verl_gsm8k(tmp_path / "train.parquet", "train", GSM8K_ROWS[:2])
    both = datasets.concatenate_datasets([datasets.Dataset.from_parquet(str(p)) for p in (train_file, test_file)])
    both.to_parquet(str(tmp_path / "both.parquet"))
    loaded = load_source(_config(tmp_path / "both.parquet", split="test"))  # indices repeat across splits
    assert loaded.rows == 3 and [p.extra["split"] for p in loaded.problems] == ["test"] * 3


def test_nested_columns_read_verl_rows_as_columns(tmp_path):
    path = write_verl_gsm8k(tmp_path / "train.parquet", "train")
    problems = load_problems(
        _config(
            path,
            layout="columns",
            problem_column="extra_info.question",
            answer_column="reward_model.ground_truth",
            id_column="extra_info.index",
        )
    )
    assert [(p.id, p.problem, p.answer) for p in problems] == [(str(i), q, g) for i, (q, _, g) in enumerate(GSM8K_ROWS)]
    assert problems[0].messages is None and problems[0].extra is None


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        (
            {"problem_column": "extra_info.question", "answer_column": "reward_model"},
            r"train\.parquet: row 1, column 'reward_model': expected text, got a dict with keys \['ground_truth', "
            r"'style'\]",
        ),
        (
            {"problem_column": "extra_info", "answer_column": "reward_model.ground_truth"},
            r"row 1, column 'extra_info': expected text, got a dict",
        ),
        (
            {"problem_column": "extra_info.question", "answer_column": "prompt"},
            r"row 1, column 'prompt': expected text, got a list of 1 items",
        ),
        (
            {
                "problem_column": "extra_info.question",
                "answer_column": "reward_model.ground_truth",
                "id_column": "prompt",
            },
            r"row 1, column 'prompt': expected text, got a list",
        ),
    ],
)
def test_a_list_or_dict_where_text_belongs_is_refused(tmp_path, columns, message):
    path = write_verl_gsm8k(tmp_path / "train.parquet", "train")
    with pytest.raises(ProblemSourceError, match=message) as info:
        load_problems(_config(path, layout="columns", **columns))
    assert "{'" not in str(info.value)  # never a Python repr of the cell


def test_layout_verl_on_a_plain_file_is_refused(tmp_path):
    path = write_math_lighteval(tmp_path / "math.parquet")
    with pytest.raises(ProblemSourceError, match="layout 'verl' expects a chat-message column 'prompt'"):
        load_problems(_config(path, layout="verl"))


def test_plain_math_lighteval_takes_the_last_box_and_the_level(tmp_path):
    path = write_math_lighteval(tmp_path / "math.parquet")
    problems = load_problems(_config(path, answer_column="solution", answer_format="boxed"))
    assert [p.answer for p in problems] == [row["gold"] for row in MATH_ROWS]
    assert [p.level for p in problems] == [1, 3, 0]
    assert [p.id for p in problems] == ["math:0", "math:1", "math:2"]


def test_hf_gsm8k_needs_a_subset(tmp_path, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "cache"))
    repo = write_hf_gsm8k_repo(tmp_path / "gsm8k")
    with pytest.raises(
        ProblemSourceError, match=r"several subsets, choose one with subset \(--subset\): \['main', 'socratic'\]"
    ):
        load_problems(_config(f"hf:{repo}"))
    problems = load_problems(
        _config(f"hf:{repo}", subset="main", split="test", problem_column="question", answer_format="gsm8k")
    )
    assert [p.answer for p in problems] == [gold for _, _, gold in GSM8K_ROWS]  # "#### 1,600" -> 1600, as verl
    assert problems[0].problem == GSM8K_ROWS[0][0]
    with pytest.raises(ProblemSourceError, match="could not load subset 'mian', split 'train'"):
        load_problems(_config(f"hf:{repo}", subset="mian", problem_column="question"))


def test_numina_no_answer_values_stop_or_are_skipped_and_counted(tmp_path):
    path = write_numina_1_5(tmp_path / "numina.parquet")
    with pytest.raises(
        ProblemSourceError,
        match=r"numina\.parquet: row 2: no-answer value 'proof' in column 'answer'; "
        r"set invalid_rows to skip \(--invalid-rows skip\)",
    ):
        load_problems(_config(path))
    loaded = load_source(_config(path, invalid_rows="skip"))
    assert [(p.id, p.answer) for p in loaded.problems] == [("numina:0", "56"), ("numina:3", "1024")]
    assert loaded.skipped == {"no-answer value 'proof'": 1, "no-answer value 'notfound'": 1}
    assert loaded.summary() == (
        "4 rows, the whole file (columns layout, no split column); skipped 2 without a usable problem or answer "
        "(no-answer value 'notfound': 1, no-answer value 'proof': 1)"
    )


def test_deepscaler_empty_answers(tmp_path, caplog):
    path = write_deepscaler(tmp_path / "deepscaler.json")
    with pytest.raises(ProblemSourceError, match=r"row 2: empty answer in column 'answer'"):
        load_problems(_config(path))
    with caplog.at_level("WARNING", logger="rlep.data.sources"):
        loaded = load_source(_config(path, invalid_rows="skip", limit=2))
    assert [p.answer for p in loaded.problems] == ["13", "42"] and loaded.skipped == {"empty answer": 1}
    assert "skipped 1 without a usable problem or answer (empty answer: 1)" in caplog.text


def test_the_limit_counts_usable_problems_and_reads_no_further(tmp_path):
    """`limit` problems, in file order: the rows after the last one taken are not read, so an invalid row there
    is neither counted as skipped nor an error (a user of 100 problems of a 10,000-row file hears about those)."""
    path = write_deepscaler(tmp_path / "deepscaler.json")  # answers "13", "", "42"
    for invalid_rows in ("skip", "error"):
        loaded = load_source(_config(path, invalid_rows=invalid_rows, limit=1))
        assert [p.answer for p in loaded.problems] == ["13"]
        assert loaded.skipped == {} and loaded.rows == 1


def test_a_file_with_no_usable_row_is_an_error_even_when_skipping(tmp_path):
    path = tmp_path / "proofs.jsonl"
    path.write_text("".join(json.dumps({"problem": f"Prove {n}.", "answer": "proof"}) + "\n" for n in range(3)))
    with pytest.raises(ProblemSourceError, match=r"no usable rows: all 3 were skipped"):
        load_problems(_config(path, invalid_rows="skip"))


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_verl_problems_written_and_read_back_keep_messages_and_extra(tmp_path, suffix):
    problems = load_problems(_config(write_dapo_math_17k(tmp_path / "dapo.parquet")))
    out = write_problems(problems, tmp_path / f"problems{suffix}")
    assert load_problems(_config(out)) == problems
