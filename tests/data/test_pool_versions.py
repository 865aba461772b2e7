import json

import pyarrow.parquet as pq

from data.fs import write_parquet_atomic
from data.pool_versions import PoolStore, describe_versions, resolve_pool_file
from data.problem import Problem
from data.trajectory import to_table, trajectory_row
from flows.cli import main


def _pool(path, answers):
    rows = []
    for i, (pid, text) in enumerate(answers):
        problem = Problem(id=pid, problem=f"{pid}=?", answer="1", data_source="tiny-math/add")
        rows.append(trajectory_row(problem, "Q", response=text, response_token_ids=[1], behaviour_logprobs=[-0.1],
                                   finish_reason="stop", correct=True, extracted_answer="1", verdict_reason="equal",
                                   reward=1.0, run_id=path.stem, policy_version=0, model="m", sampling={}, sample_index=i))  # fmt: skip
    write_parquet_atomic(path, to_table(rows))
    return path


def test_versions_accumulate_new_answers_with_lineage(tmp_path, capsys):
    store = PoolStore(tmp_path / "pools")
    assert store.latest() is None
    v1 = store.publish(_pool(tmp_path / "a.parquet", [("p1", "\\boxed{1}"), ("p2", "\\boxed{1}")]), {"run_dir": "a", "policy_version": 0})
    v2 = store.publish(_pool(tmp_path / "b.parquet", [("p1", " \\boxed{1} "), ("p3", "1")]), {"run_dir": "b", "policy_version": 40})
    assert [v1.name, v2.name] == ["v0001", "v0002"] and store.versions() == [1, 2]
    assert pq.read_table(v1 / "pool.parquet").num_rows == 2  # versions are immutable
    assert pq.read_table(v2 / "pool.parquet").num_rows == 3  # p1's answer was already there (whitespace aside)
    lineage = json.loads((v2 / "lineage.json").read_text())
    assert lineage["parent"] == 1 and lineage["problems"] == 3
    assert [(c["run_dir"], c["rows_added"]) for c in lineage["contributions"]] == [("a", 2), ("b", 1)]
    assert resolve_pool_file(tmp_path / "pools") == v2 / "pool.parquet"
    assert resolve_pool_file(v1) == v1 / "pool.parquet"
    assert [r["version"] for r in describe_versions(tmp_path / "pools")] == ["v0001", "v0002"]
    assert main(["inspect", str(tmp_path / "pools")]) == 0
    assert "v0002" in capsys.readouterr().out
