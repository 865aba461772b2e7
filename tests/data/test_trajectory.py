import re
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest

import rlep.data.trajectory as trajectory
from rlep.data.problem import Problem
from rlep.data.trajectory import (
    COLUMNS,
    TRAJECTORY_SCHEMA,
    as_trajectory_table,
    rows_for_problem,
    to_table,
    trajectory_row,
)
from rlep.tasks.engines.base import Completion

REPO = Path(__file__).resolve().parents[2]
PROBLEM = Problem(id="p7", problem="What is 1/2 + 1/4?", answer="3/4", data_source="tiny-math/frac", level=2)
WHEN = datetime(2025, 7, 1, 12, 30, tzinfo=timezone.utc)
SAMPLING = {"n": 2, "temperature": 1.0, "top_p": 1.0, "max_tokens": 32, "seed": 0, "stop": []}

REQUIRED = [
    ("run_id", pa.string()),
    ("problem_id", pa.string()),
    ("data_source", pa.string()),
    ("prompt", pa.string()),
    ("response", pa.string()),
    ("response_token_ids", pa.list_(pa.int32())),
    ("behaviour_logprobs", pa.list_(pa.float32())),
    ("extracted_answer", pa.string()),
    ("gold_answer", pa.string()),
    ("correct", pa.bool_()),
    ("verdict_reason", pa.string()),
    ("reward", pa.float32()),
    ("policy_version", pa.int32()),
    ("model", pa.string()),
    ("sampling", pa.string()),
    ("created_at", pa.timestamp("us", tz="UTC")),
]


def _completions():
    return [
        Completion(
            text="\\boxed{3/4}",
            token_ids=[5, 6, 7],
            logprobs=[-0.5, -0.25, -1.0],
            finish_reason="stop",
            prompt_token_ids=[1, 2],
        ),
        Completion(
            text="1/2", token_ids=[8, 9], logprobs=[-2.0, -0.125], finish_reason="length", prompt_token_ids=[1, 2]
        ),
    ]


def _verdicts():
    return [
        SimpleNamespace(correct=True, extracted="3/4", reason="equal", seconds=0.01),
        SimpleNamespace(correct=False, extracted=None, reason="no-answer", seconds=0.0),
    ]


def test_schema_starts_with_the_required_columns_in_order():
    assert [(f.name, f.type) for f in TRAJECTORY_SCHEMA][: len(REQUIRED)] == REQUIRED
    assert COLUMNS[len(REQUIRED) :] == (
        "sample_index",
        "finish_reason",
        "level",
        "prompt_token_ids",
        "verify_seconds",
        "problem",
        "model_revision",
        "origin",
    )
    nullable = {f.name for f in TRAJECTORY_SCHEMA if f.nullable}
    assert nullable == {"extracted_answer", "model_revision"}


def test_docstring_table_documents_every_column_with_its_type():
    # docs/schema.md copies this table, so it must not drift from the schema.
    documented = re.findall(r"^\| `(\w+)` \| ([^|]+) \| (yes|no) \| .+ \|$", trajectory.__doc__, re.M)
    arrow_names = {"float": "float32", "double": "float64", "timestamp[us, tz=UTC]": "timestamp[us, UTC]"}

    def spelled(t: pa.DataType) -> str:
        text = str(t).replace("item: ", "")
        return re.sub(r"float(?!\d)", "float32", text) if text.startswith("list") else arrow_names.get(text, text)

    assert [(name, kind.strip(), null == "yes") for name, kind, null in documented] == [
        (f.name, spelled(f.type), f.nullable) for f in TRAJECTORY_SCHEMA
    ]


def test_schema_doc_table_lists_every_column_in_order():
    section = (REPO / "docs" / "schema.md").read_text()
    documented = re.findall(r"^\| `(\w+)` \| ([^|]+) \| (yes|no) \|", section, re.M)
    assert [(name, kind.strip(), null == "yes") for name, kind, null in documented] == [
        (name, kind.strip(), null == "yes")
        for name, kind, null in re.findall(r"^\| `(\w+)` \| ([^|]+) \| (yes|no) \|", trajectory.__doc__, re.M)
    ]


def test_rows_for_problem_carry_every_field():
    rows = rows_for_problem(
        PROBLEM,
        "Q: What is 1/2 + 1/4?\nA: ",
        _completions(),
        _verdicts(),
        [1.0, 0.0],
        run_id="run-1",
        policy_version=3,
        model="tiny",
        sampling=SAMPLING,
        created_at=WHEN,
        model_revision="sha256:ab",
    )
    table = to_table(rows)
    assert table.schema == TRAJECTORY_SCHEMA
    first, second = table.to_pylist()
    assert first == {
        "run_id": "run-1",
        "problem_id": "p7",
        "data_source": "tiny-math/frac",
        "prompt": "Q: What is 1/2 + 1/4?\nA: ",
        "response": "\\boxed{3/4}",
        "response_token_ids": [5, 6, 7],
        "behaviour_logprobs": [-0.5, -0.25, -1.0],  # exact in float32
        "extracted_answer": "3/4",
        "gold_answer": "3/4",
        "correct": True,
        "verdict_reason": "equal",
        "reward": 1.0,
        "policy_version": 3,
        "model": "tiny",
        "sampling": '{"max_tokens":32,"n":2,"seed":0,"stop":[],"temperature":1.0,"top_p":1.0}',
        "created_at": WHEN,
        "sample_index": 0,
        "finish_reason": "stop",
        "level": 2,
        "prompt_token_ids": [1, 2],
        "verify_seconds": pytest.approx(0.01),
        "problem": "What is 1/2 + 1/4?",
        "model_revision": "sha256:ab",
        "origin": "fresh",
    }
    assert (second["sample_index"], second["extracted_answer"], second["correct"], second["finish_reason"]) == (
        1,
        None,
        False,
        "length",
    )


def test_rows_share_one_timestamp_when_none_is_given():
    rows = rows_for_problem(
        PROBLEM, "Q", _completions(), _verdicts(), [1.0, 0.0], run_id="r", policy_version=0, model="m", sampling={}
    )
    assert rows[0]["created_at"] == rows[1]["created_at"]
    assert rows[0]["created_at"].tzinfo is timezone.utc


def test_real_verdict_class_fits():
    verdict_module = pytest.importorskip("rlep.verifiers.verdict")
    verdict = verdict_module.Verdict(correct=True, extracted="3/4", reason="equal", seconds=0.5)
    (row,) = rows_for_problem(
        PROBLEM,
        "Q",
        _completions()[:1],
        [verdict],
        [1.0],
        run_id="r",
        policy_version=0,
        model="m",
        sampling={},
        created_at=WHEN,
    )
    assert (row["correct"], row["extracted_answer"], row["verdict_reason"], row["verify_seconds"]) == (
        True,
        "3/4",
        "equal",
        0.5,
    )


def test_misaligned_inputs_are_refused():
    with pytest.raises(ValueError, match="3 token ids but 2 log-probs"):
        trajectory_row(
            PROBLEM,
            "Q",
            response="x",
            response_token_ids=[1, 2, 3],
            behaviour_logprobs=[-1.0, -1.0],
            finish_reason="stop",
            correct=False,
            extracted_answer=None,
            verdict_reason="no-answer",
            reward=0.0,
            run_id="r",
            policy_version=0,
            model="m",
            sampling={},
            sample_index=0,
        )
    with pytest.raises(ValueError, match="2 completions, 1 verdicts, 2 rewards"):
        rows_for_problem(
            PROBLEM,
            "Q",
            _completions(),
            _verdicts()[:1],
            [1.0, 0.0],
            run_id="r",
            policy_version=0,
            model="m",
            sampling={},
        )


def test_to_table_refuses_missing_unknown_and_null_fields():
    (row,) = rows_for_problem(
        PROBLEM,
        "Q",
        _completions()[:1],
        _verdicts()[:1],
        [1.0],
        run_id="r",
        policy_version=0,
        model="m",
        sampling={},
        created_at=WHEN,
    )
    with pytest.raises(ValueError, match=r"row 1: missing columns \['reward'\], unknown columns \['score'\]"):
        to_table([row, {**{k: v for k, v in row.items() if k != "reward"}, "score": 1.0}])
    with pytest.raises(ValueError, match="'gold_answer' is required but holds nulls"):
        to_table([{**row, "gold_answer": None}])
    assert to_table([{**row, "extracted_answer": None}]).column("extracted_answer").null_count == 1


def test_as_trajectory_table_reorders_and_casts():
    (row,) = rows_for_problem(
        PROBLEM,
        "Q",
        _completions()[:1],
        _verdicts()[:1],
        [1.0],
        run_id="r",
        policy_version=0,
        model="m",
        sampling={},
        created_at=WHEN,
    )
    loose = pa.Table.from_pylist([dict(reversed(list(row.items())))])  # int64, double, reversed order
    assert loose.schema.field("level").type == pa.int64()
    table = as_trajectory_table(loose)
    assert table.schema == TRAJECTORY_SCHEMA and table.to_pylist() == to_table([row]).to_pylist()
    with pytest.raises(ValueError, match=r"mine: not a trajectory table \(missing columns \['model'\]"):
        as_trajectory_table(loose.drop_columns(["model"]), "mine")


def test_data_package_imports_nothing_above_it():
    # Dependencies point flows -> tasks -> data; the data layer must load without tasks, flows or Prefect.
    code = (
        "import sys, rlep.data.trajectory, rlep.data.store, rlep.data.inspect, rlep.data.rlep_format; "
        "print(sorted({m.split('.')[1] if m.startswith('rlep.') else m.split('.')[0] for m in sys.modules} & "
        "{'tasks', 'flows', 'prefect', 'verifiers', 'torch', 'vllm'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_files_written_before_the_origin_column_read_as_fresh(tmp_path):
    import pyarrow.parquet as pq

    from rlep.data.store import read_trajectory_files

    problem = Problem(id="p1", problem="1+1", answer="2", data_source="tiny-math/add")
    row = trajectory.trajectory_row(
        problem,
        "Q: 1+1",
        response="2",
        response_token_ids=[5],
        behaviour_logprobs=[-0.5],
        finish_reason="stop",
        correct=True,
        extracted_answer="2",
        verdict_reason="equal",
        reward=1.0,
        run_id="r",
        policy_version=0,
        model="m",
        sampling={"seed": 3},
        sample_index=0,
        origin="replay",
    )
    table = trajectory.to_table([row])
    pq.write_table(table.drop_columns(["origin"]), tmp_path / "old.parquet")  # a schema-version-1 file
    pq.write_table(table, tmp_path / "new.parquet")
    both = read_trajectory_files([tmp_path / "old.parquet", tmp_path / "new.parquet"])
    assert both["origin"].to_pylist() == ["fresh", "replay"]
    assert trajectory.as_trajectory_table(pq.read_table(tmp_path / "old.parquet"))["origin"].to_pylist() == ["fresh"]


def test_rollout_row_round_trip_keeps_every_field():
    from rlep.data.rollout import Rollout

    problem = Problem(id="p1", problem="1+1", answer="2", data_source="tiny-math/add")
    rollout = Rollout(
        problem_id="p1",
        data_source="tiny-math/add",
        prompt="Q: 1+1",
        gold_answer="2",
        response="2",
        response_token_ids=[5, 2],
        policy_version=3,
        origin="replay",
        prompt_token_ids=[7, 8],
        behaviour_logprobs=[-0.5, -0.25],
        reward=1.0,
        correct=True,
        extracted_answer="2",
        verdict_reason="equal",
        finish_reason="length",
        sample_index=4,
        sampling={"n": 8, "seed": 11, "temperature": 0.7},
    )
    row = trajectory.to_table([rollout.to_row(problem, run_id="r", model="m")]).to_pylist()[0]
    assert Rollout.from_row(row) == rollout
    imported = Rollout.from_row({**row, "behaviour_logprobs": [], "response_token_ids": [], "origin": None})
    assert imported.behaviour_logprobs is None and imported.origin == "fresh"


def test_behaviour_logprobs_are_documented_as_the_engines_store_them():
    # Both engines store the log-prob under the distribution sampled from, after temperature and top-p (vLLM's
    # processed log-probs, the HF engine's processed scores): the docstring said temperature 1 without top-p.
    row = r"^\| `behaviour_logprobs` \| [^|]+ \| no \| (.+) \|$"
    described = re.search(row, trajectory.__doc__, re.M).group(1)
    assert "after temperature and top-p" in described and "temperature 1" not in described
    assert described == re.search(row, (REPO / "docs" / "schema.md").read_text(), re.M).group(1)
