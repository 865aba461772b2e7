import json
import logging

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from rlep.data.sources import ProblemSourceError, load_problems, write_problems
from rlep.tasks.settings.source import ProblemSourceConfig, default_task, problem_source


def _load(source, **kwargs):
    return load_problems(problem_source(source=str(source), **kwargs))


def test_tiny_math_builtin_with_limit():
    problems = _load("tiny-math", split="test", limit=7)
    assert len(problems) == 7 and all(p.data_source.startswith("tiny-math/") for p in problems)


def test_tiny_math_families_and_levels_select_cells():
    problems = _load("tiny-math", split="test", limit=40, families=["decimal", "sub"], levels=[1])
    assert len(problems) == 40
    assert {(p.data_source, p.level) for p in problems} == {("tiny-math/decimal", 1), ("tiny-math/sub", 1)}


def test_families_and_levels_are_checked_and_do_not_apply_to_files(tmp_path):
    with pytest.raises(ValueError, match="families"):
        problem_source(families=["geometry"])
    with pytest.raises(ValueError, match="levels"):
        problem_source(levels=[])
    path = tmp_path / "p.jsonl"
    path.write_text('{"problem": "1+1=?", "answer": "2"}\n')
    tiny_math_only = {"seed": 0, "families": ["decimal"], "levels": [1]}
    # Validation refuses them, naming each (the configuration builder says so too, tests/flows/test_options.py),
    # even at their defaults, and in a config built in code: nothing given is dropped silently.
    with pytest.raises(ValidationError) as refused:
        problem_source(source=str(path), limit=5, **tiny_math_only)
    assert _refused(refused) == [("file", name) for name in tiny_math_only]
    with pytest.raises(ValidationError) as refused:
        problem_source(source="hf:x", tiny_math_size=100)
    assert _refused(refused) == [("hf", "tiny_math_size")]
    assert problem_source(limit=5, **tiny_math_only).families == ["decimal"]
    assert [p.answer for p in _load(path)] == ["2"]


def _refused(err):
    """(kind, setting) of each setting of another kind that validation refused."""
    return [e["loc"] for e in err.value.errors() if e["type"] == "extra_forbidden"]


def test_default_task_is_one_decimal_addition():
    problems = load_problems(default_task("test", limit=20))
    assert {(p.data_source, p.level) for p in problems} == {("tiny-math/decimal", 1)}


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_write_then_read_round_trip(tmp_path, suffix):
    problems = _load("tiny-math", split="train", limit=20)
    path = write_problems(problems, tmp_path / f"p{suffix}")
    assert _load(path) == problems


def test_csv_with_custom_columns(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text("question,solution,uid\nWhat is 2+2?,4,a\nHalf of 3?,3/2,b\n", encoding="utf-8")
    problems = _load(path, problem_column="question", answer_column="solution", id_column="uid")
    assert [(p.id, p.problem, p.answer, p.data_source) for p in problems] == [
        ("a", "What is 2+2?", "4", "mine"),
        ("b", "Half of 3?", "3/2", "mine"),
    ]


def test_parquet_data_source_column_used(tmp_path):
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"problem": ["1+1"], "answer": ["2"], "data_source": ["arith"]}), path)
    assert _load(path)[0].data_source == "arith"


def test_missing_column_names_file_and_column(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"question": "1+1", "answer": "2"}) + "\n")
    with pytest.raises(ProblemSourceError, match=r"p\.jsonl: missing column 'problem' \(set by problem_column\)"):
        _load(path)
    with pytest.raises(ProblemSourceError, match="missing column 'uid'"):
        _load(path, problem_column="question", id_column="uid")


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("empty.jsonl", b"", "empty"),
        ("latin.csv", "problem,answer\n\xe9t\xe9,1\n".encode("latin-1"), "not UTF-8"),
        ("broken.jsonl", b'{"problem": "1+1", "answer": "2"}\n{oops\n', "line 2 is not valid JSON"),
        ("broken.parquet", b"PAR1 this is not parquet", "unreadable"),
    ],
)
def test_bad_files_give_one_clear_error(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ProblemSourceError, match=message) as info:
        _load(path)
    assert name in str(info.value)


def test_unknown_source_and_missing_file(tmp_path):
    with pytest.raises(ProblemSourceError, match="unknown problem source"):
        _load("gsm8k")
    with pytest.raises(ProblemSourceError, match="no such file"):
        _load(tmp_path / "nope.jsonl")
    (tmp_path / "d.jsonl").mkdir()  # it was "no such file" too
    with pytest.raises(ProblemSourceError, match=r"d\.jsonl: a directory, not a file of problems$"):
        _load(tmp_path / "d.jsonl")


def test_hf_dataset_unavailable_is_a_clear_error():
    with pytest.raises(ProblemSourceError, match="hf:rlep-no-such/dataset"):
        _load("hf:rlep-no-such/dataset", split="train")


@pytest.mark.parametrize("offline", [False, True], ids=["no-network", "HF_HUB_OFFLINE"])
def test_an_hf_dataset_out_of_reach_is_one_line_at_once(offline, tmp_path, monkeypatch, caplog, capfd):
    # Before: without a network the hub client retried 5 times (11 lines on stderr, 27 s) before the one line.
    import socket
    import time

    import datasets
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)  # what HF_HUB_OFFLINE=1 (or its absence) sets
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", offline)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "cache"))  # nothing cached

    def no_network(*args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)  # no network, wherever the test runs
    start = time.perf_counter()
    with pytest.raises(ProblemSourceError) as info:
        _load("hf:openai/gsm8k", subset="main")
    assert time.perf_counter() - start < 3
    reason = "HF_HUB_OFFLINE is set" if offline else "no connection to huggingface.co:443: Name or service not known"
    assert str(info.value) == (
        f"hf:openai/gsm8k: subset 'main', split 'train' is not in the local Hugging Face cache and the hub cannot be "
        f"reached ({reason}); load it once on a machine that reaches the hub and copy its cache (HF_HOME), or give "
        "a local file as source"
    )
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("huggingface_hub")]
    assert "Retrying" not in capfd.readouterr().err


def test_write_rejects_unknown_suffix(tmp_path):
    with pytest.raises(ProblemSourceError, match="must end in .jsonl or .parquet"):
        write_problems([], tmp_path / "p.txt")
    assert not list(tmp_path.iterdir())


def test_gold_answer_out_of_a_solution_column(tmp_path):
    math_style = tmp_path / "math.jsonl"
    rows = [
        {"problem": "What is $1+1$?", "solution": "We add: $1+1=\\boxed{2}$."},
        {"problem": "Solve $x^2=4$.", "solution": "So $x = \\boxed{-2}$ or $x = \\boxed{2}$."},
        {"problem": "Half of 3?", "solution": "It is $\\boxed{\\frac{3}{2}}$. Check: 2 times 3/2 is 3."},
    ]
    math_style.write_text("".join(json.dumps(row) + "\n" for row in rows))
    problems = _load(math_style, answer_column="solution", answer_format="boxed")
    assert [p.answer for p in problems] == ["2", "2", "\\frac{3}{2}"]  # the last box, as verl reads MATH
    gsm8k_style = tmp_path / "gsm8k.jsonl"
    gsm8k_style.write_text(
        json.dumps({"question": "3 apples and 4 more?", "answer": "3+4=<<3+4=7>>7\n#### 7"})
        + "\n"
        + json.dumps({"question": "Cost of 12 at 100 each?", "answer": "12*100=1200\n#### 1,200"})
        + "\n"
    )
    problems = _load(gsm8k_style, problem_column="question", answer_format="gsm8k")
    assert [p.answer for p in problems] == ["7", "1200"]  # thousands commas removed, as verl's gsm8k.py
    # The default reads the column as the answer itself.
    assert _load(gsm8k_style, problem_column="question")[0].answer == "3+4=<<3+4=7>>7\n#### 7"


@pytest.mark.parametrize(
    ("answer_format", "expected"), [("boxed", r"no final \\boxed\{\.\.\.\}"), ("gsm8k", "no `#### answer` line")]
)
def test_a_solution_without_its_answer_names_the_row(tmp_path, answer_format, expected):
    path = tmp_path / "p.jsonl"
    path.write_text(
        json.dumps({"problem": "1+1?", "answer": "2"})
        + "\n"
        + json.dumps({"problem": "2+2?", "answer": "it is four"})
        + "\n"
    )
    with pytest.raises(ProblemSourceError, match=f"row 1: {expected} in column 'answer'"):
        _load(path, answer_format=answer_format)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("p.jsonl", '{"problem": "1+1", "answer": "2"}\n{"problem": "2+2", "answer": ""}\n'),
        ("p.csv", "problem,answer\n1+1,2\n2+2,\n"),  # the header is not a row
    ],
)
def test_the_row_named_is_counted_from_one_as_the_user_counts_it(tmp_path, name, text):
    """The second record of the file is `row 2` (the first is row 1), whatever the format."""
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ProblemSourceError, match=rf"{name}: row 2: empty answer in column 'answer'"):
        _load(path)


def test_numbers_are_text_but_other_objects_are_not(tmp_path):
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"problem": ["1+1", "2.5*2"], "answer": [2, 5.0], "id": [10, 11]}), path)
    assert [(p.id, p.answer) for p in _load(path)] == [("10", "2"), ("11", "5")]
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"problem": "1+1", "answer": True}) + "\n")
    with pytest.raises(ProblemSourceError, match="row 1, column 'answer': expected text, got a boolean"):
        _load(path)


def test_a_split_a_file_cannot_apply_is_refused(tmp_path):
    plain = tmp_path / "p.jsonl"
    plain.write_text(json.dumps({"problem": "1+1", "answer": "2"}) + "\n")
    # Given by the user (flag or YAML): refused by the configuration builder, in one line.
    assert problem_source(source=str(plain), split="test").refused_choices({"source", "split"}) == [
        f"split: {plain} has no split column (split or extra_info.split) to choose rows by; a file without one is "
        "read whole (drop the split, or name the column with split_column)"
    ]
    # Not given (a section's default): the whole file is read, and the log says the split chose nothing.
    assert len(_load(plain, split="test")) == 1
    with_split = tmp_path / "s.csv"
    with_split.write_text("problem,answer,split\n1+1,2,train\n2+2,4,test\n", encoding="utf-8")
    assert problem_source(source=str(with_split), split="test").refused_choices({"split"}) == []
    assert [p.answer for p in _load(with_split, split="test")] == ["4"]
    with pytest.raises(ProblemSourceError, match=r"no rows of split 'dev' in column 'split' \(it holds: test, train\)"):
        _load(with_split, split="dev")
    with pytest.raises(ProblemSourceError, match="missing column 'part' \\(set by split_column\\)"):
        _load(with_split, split_column="part")


def test_settings_of_other_sources_are_refused():
    with pytest.raises(ValidationError) as refused:
        problem_source(source="data.jsonl", subset="main")
    assert _refused(refused) == [("file", "subset")]
    assert "file.subset\n  Extra inputs are not permitted" in str(refused.value)
    with pytest.raises(ValidationError) as refused:
        problem_source(subset="main", answer_column="a", invalid_rows="skip")
    assert _refused(refused) == [("tiny-math", "subset"), ("tiny-math", "answer_column"), ("tiny-math", "invalid_rows")]
    assert problem_source(source="hf:openai/gsm8k", subset="main", split="test", answer_format="gsm8k").subset == "main"


def test_the_cli_exposes_the_source_settings(tmp_path):
    import argparse

    from rlep.flows.options import ConfigError, add_model_flags, build_config, flag_overrides

    parser = argparse.ArgumentParser()
    add_model_flags(parser, ProblemSourceConfig)
    args = parser.parse_args(
        [
            "--source",
            "hf:openai/gsm8k",
            "--subset",
            "main",
            "--layout",
            "columns",
            "--answer-column",
            "reward_model.ground_truth",
            "--invalid-rows",
            "skip",
            "--no-answer-values",
            "proof",
            "n/a",
            "--split-column",
            "extra_info.split",
        ]
    )
    config = build_config(ProblemSourceConfig, None, flag_overrides(args))
    assert (
        config.subset,
        config.layout,
        config.answer_column,
        config.invalid_rows,
        config.no_answer_values,
        config.split_column,
    ) == ("main", "columns", "reward_model.ground_truth", "skip", ["proof", "n/a"], "extra_info.split")
    plain = tmp_path / "p.jsonl"
    plain.write_text(json.dumps({"problem": "1+1", "answer": "2"}) + "\n")
    args = parser.parse_args(["--source", str(plain), "--split", "test"])
    with pytest.raises(ConfigError, match=r"invalid configuration: split: .*p\.jsonl has no split column"):
        build_config(ProblemSourceConfig, None, flag_overrides(args))


def test_the_kind_of_source_is_read_from_source_and_each_kind_has_only_its_own_settings(tmp_path):
    from rlep.tasks.settings.source import FileSource, HfSource, TinyMathSource

    assert isinstance(problem_source(), TinyMathSource) and problem_source().kind == "tiny-math"
    assert isinstance(problem_source(source="hf:openai/gsm8k", subset="main"), HfSource)
    file_source = problem_source(source="data/x.parquet", answer_format="boxed")
    assert isinstance(file_source, FileSource) and file_source.kind == "file"
    assert "families" not in file_source.model_dump() and "subset" not in file_source.model_dump()
    assert "problem_column" not in problem_source().model_dump()
    # A given kind is the kind: its source must be of it (a section switched to another kind by merging is
    # tests/tasks/test_settings.py's).
    assert problem_source(kind="file", source="data/x.parquet") == problem_source(source="data/x.parquet")
    with pytest.raises(ValueError, match=r"file.source\n.*'tiny-math' is not a file: it names the tiny-math kind"):
        problem_source(kind="file", source="tiny-math")
    with pytest.raises(ValueError, match=r"tiny-math.source\n  Input should be 'tiny-math'"):
        problem_source(**{**default_task("test", limit=5).model_dump(), "source": "data/x.parquet"})
    with pytest.raises(ValueError, match="problem_colum"):  # a misspelt setting is still an error
        problem_source(source="data/x.parquet", problem_colum="q")
    with pytest.raises(ValueError, match="hf:"):
        problem_source(source="hf:")


def test_the_kinds_of_source_are_exclusive_in_the_prefect_parameter_schema():
    # Prefect's server checks a deployment's parameters against the flow's schema, where the source union is a
    # `oneOf`: a value matching two kinds (a file pattern that also took `tiny-math`) would be refused.
    from prefect.utilities.callables import parameter_schema
    from prefect.utilities.schema_tools.validation import validate

    from rlep.flows.train import train_flow

    schema = parameter_schema(train_flow.fn).model_dump_for_openapi()
    variants = schema["definitions"]["TrainConfig"]["properties"]["problems"]["oneOf"]
    assert len(variants) == 3
    for problems in (  # with or without `kind`, as settings were written before sources had one
        {"source": "tiny-math", "split": "train", "limit": 8, "families": ["add"]},
        {"source": "tiny-math", "split": "test"},
        {"source": "runs/math.parquet", "problem_column": "question", "answer_format": "boxed"},
        {"source": "hf:openai/gsm8k", "subset": "main"},
        {"kind": "file", "source": "runs/math.parquet", "split": "test"},
        {"kind": "hf", "source": "hf:openai/gsm8k", "subset": "main"},
    ):
        assert validate({"config": {"problems": problems}}, schema, raise_on_error=False, preprocess=True) == []
    for problems in (
        {"source": "runs/math.parquet", "families": ["add"]},
        {"kind": "file", "source": "tiny-math"},
        {"kind": "tiny-math", "source": "tiny-math", "subset": "main"},
    ):
        refused = validate({"config": {"problems": problems}}, schema, raise_on_error=False, preprocess=True)
        assert len(refused) == 1 and "is not valid under any of the given schemas" in refused[0].message


def test_settings_without_a_kind_or_from_before_the_kinds_are_migrated_once():
    from rlep.tasks.settings.migrate import upgrade_source_settings

    assert upgrade_source_settings({}) == {"kind": "tiny-math"}
    assert upgrade_source_settings({"split": "test"}) == {"kind": "tiny-math", "split": "test"}
    assert upgrade_source_settings({"source": "hf:d"}) == {"kind": "hf", "source": "hf:d"}
    assert upgrade_source_settings({"source": "d.csv", "seed": 1}) == {"kind": "file", "source": "d.csv", "seed": 1}
    assert upgrade_source_settings({"kind": "file", "source": "tiny-math"}) == {"kind": "file", "source": "tiny-math"}
    # A dump from before the kinds were separate models held every kind's settings; its kind never read the
    # others', whatever they held. Only such a dump loses them: above, `seed` stays and validation refuses it.
    before = {
        "source": "d.csv", "split": "train", "subset": None, "limit": None, "seed": 0, "tiny_math_size": 2000,
        "families": ["decimal"], "levels": [1], "layout": "auto", "problem_column": "q", "answer_column": None,
        "answer_format": "boxed", "id_column": None, "data_source_column": None, "split_column": None,
        "invalid_rows": "error", "no_answer_values": ["proof"],
    }  # fmt: skip
    upgraded = upgrade_source_settings(before)
    assert upgraded["kind"] == "file" and not {"subset", "seed", "tiny_math_size", "families", "levels"} & set(upgraded)
    own = {"problem_column": "q", "answer_format": "boxed", "no_answer_values": ["proof"]}
    assert problem_source(**before) == problem_source(source="d.csv", **own)
    tiny = upgrade_source_settings({**before, "source": "tiny-math"})
    assert set(tiny) == {"kind", "source", "split", "limit", "seed", "tiny_math_size", "families", "levels"}


def test_help_says_which_kind_of_source_a_flag_is_for():
    import argparse

    from rlep.flows.options import add_model_flags

    parser = argparse.ArgumentParser()
    add_model_flags(parser, ProblemSourceConfig)
    text = " ".join(parser.format_help().split())
    assert (
        "--families [{add,sub,mul,frac,decimal} ...] The families to draw from, in equal shares. [only for: tiny-math "
        "source]" in text
    )
    assert "[only for: file source, hf: dataset source]" in text and "[only for: hf: dataset source]" in text
