import json

import pyarrow.parquet as pq
import pytest
from conftest import judged_row, write_rows

from rlep.data.fs import write_parquet_atomic
from rlep.data.pool import PoolError, PoolStore, describe_versions, read_pool, resolve_pool_file
from rlep.data.problem import Problem
from rlep.flows.cli import main


def _pool(path, answers):
    rows = [
        judged_row(
            Problem(id=pid, problem=f"{pid}=?", answer="1", data_source="tiny-math/add"),
            text,
            prompt="Q",
            response_token_ids=[1],
            behaviour_logprobs=[-0.1],
            run_id=path.stem,
            model="m",
            sample_index=i,
        )
        for i, (pid, text) in enumerate(answers)
    ]
    return write_rows(path, rows)


def test_versions_accumulate_new_answers_with_lineage(tmp_path, capsys):
    store = PoolStore(tmp_path / "pools")
    assert store.latest() is None
    v1 = store.publish(
        _pool(tmp_path / "a.parquet", [("p1", "\\boxed{1}"), ("p2", "\\boxed{1}")]),
        {"run_dir": "a", "policy_version": 0},
    )
    v2 = store.publish(
        _pool(tmp_path / "b.parquet", [("p1", " \\boxed{1} "), ("p3", "1")]), {"run_dir": "b", "policy_version": 40}
    )
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


def test_a_recollection_that_verified_nothing_still_publishes_a_version(tmp_path):
    # A policy can get every sampled answer wrong: its pool file has no rows, and the new version is the old
    # one's rows with the recollection recorded (0 rows added), never a crash in the publish.
    store = PoolStore(tmp_path / "pools")
    store.publish(_pool(tmp_path / "a.parquet", [("p1", "\\boxed{1}")]), {"run_dir": "a"})
    v2 = store.publish(_pool(tmp_path / "none.parquet", []), {"run_dir": "none", "after_step": 10})
    assert pq.read_table(v2 / "pool.parquet").num_rows == 1
    assert [c["rows_added"] for c in store.lineage(2)["contributions"]] == [1, 0]


def test_export_takes_any_pool_path_train_takes_and_import_gives_one_back(tmp_path):
    store = PoolStore(tmp_path / "pools")
    store.publish(_pool(tmp_path / "a.parquet", [("p1", "\\boxed{1}")]), {"run_dir": "a"})
    v2 = store.publish(_pool(tmp_path / "b.parquet", [("p2", "\\boxed{1}")]), {"run_dir": "b"})
    out = tmp_path / "rlep.parquet"
    assert main(["pool", "export", str(tmp_path / "pools"), "--out", str(out)]) == 0  # the store: its latest version
    exported = pq.read_table(out)
    assert exported.num_rows == 2 and sorted(r["problem_id"] for r in exported["extra_info"].to_pylist()) == [
        "p1",
        "p2",
    ]
    assert (
        main(["pool", "import", str(out), "--out", str(tmp_path / "imported")]) == 0
    )  # a directory: pool.parquet inside
    _, table = read_pool(tmp_path / "imported")
    assert sorted(table["problem_id"].to_pylist()) == ["p1", "p2"]
    assert read_pool(v2)[0] == v2 / "pool.parquet"


def test_cli_import_matches_problems_reports_the_rate_and_inspect_reads_its_directory(tmp_path, capsys):
    pool = _pool(tmp_path / "a.parquet", [("p1", "\\boxed{1}")])
    exported = tmp_path / "rlep.parquet"
    assert main(["pool", "export", str(pool), "--out", str(exported), "--strict"]) == 0
    assert "strict re-check: dropped 0 answers" in capsys.readouterr().out
    # The training problems carry other ids; only the problem text is shared.
    problems = tmp_path / "train.jsonl"
    problems.write_text(json.dumps({"id": "t7", "problem": " p1=?  ", "answer": "1"}) + "\n")
    assert (
        main(["pool", "import", str(exported), "--out", str(tmp_path / "imported"), "--problems", str(problems)]) == 0
    )
    assert "matched 1 of 1 problems to " in (out := capsys.readouterr().out)
    assert "(100.0%: 0 by extra_info.index, 1 by problem text; 0 with another gold answer)" in out
    _, table = read_pool(tmp_path / "imported")
    assert table["problem_id"].to_pylist() == ["t7"]
    assert main(["inspect", str(tmp_path / "imported"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["samples"] == 1
    # A problem file has no experience: exit 2, nothing written.
    bare = tmp_path / "bare.parquet"
    write_parquet_atomic(
        bare, [{"data_source": "d", "prompt": "p", "reward_model": {"style": "rule", "ground_truth": "1"}}]
    )
    assert main(["pool", "import", str(bare), "--out", str(tmp_path / "none")]) == 2
    assert "none of its 1 rows has reward_model.candidates" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["export", "{pool}", "--out", "{pool}"], "out '{pool}' is the pool it reads"),
        (["export", "{dir}", "--out", "{pool}"], "out '{pool}' is the pool file it reads"),
        (["export", "{pool}", "--out", "{dir}/e.txt"], "out '{dir}/e.txt': the export is a Parquet file"),
        (["import", "{pool}", "--out", "{pool}"], "out '{pool}' is the file it reads"),
        (["import", "{pool}", "--out", "{dir}"], "out '{dir}/pool.parquet' is the file it reads"),
        # Written silently as Parquet, or over a run's own pool (its manifest and answers left as they were).
        (["import", "{pool}", "--out", "{dir}/i.csv"], "out '{dir}/i.csv': the import is a Parquet file"),
        (["import", "{pool}", "--out", "{dir}/c"], "out '{dir}/c': {dir}/c is a collection run's"),
        (["import", "{pool}", "--out", "{dir}/t/p.parquet"], "out '{dir}/t/p.parquet': {dir}/t is a training run's"),
        (["import", "{pool}", "--out", "{dir}/v/pool.parquet"], "{dir}/v is a published pool version's"),
        (["import", "{pool}", "--out", "{dir}/i.parquet", "--run-id", ""], "run_id: String should have at least 1"),
    ],
    ids=[
        "export-over-its-pool",
        "export-over-its-run-pool",
        "export-not-parquet",
        "import-over-it",
        "import-into-it",
        "import-not-parquet",
        "import-into-a-collection",
        "import-into-a-training-run",
        "import-into-a-store-version",
        "import-empty-run-id",
    ],
)
def test_a_pool_command_never_writes_over_what_it_reads(tmp_path, capsys, args, message):
    pool = _pool(tmp_path / "pool.parquet", {"p1": ["1"]})
    for run, mark in (("c", "manifest.json"), ("t", "train_config.json"), ("v", "lineage.json")):
        (tmp_path / run).mkdir()
        (tmp_path / run / mark).write_text("{}")
    before = pool.read_bytes()
    filled = [a.format(pool=pool, dir=tmp_path) for a in args]
    assert main(["pool", *filled]) == 2
    assert message.format(pool=pool, dir=tmp_path) in capsys.readouterr().err
    assert pool.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["c", "pool.parquet", "t", "v"]
    assert sorted(p.name for p in tmp_path.glob("*/*")) == ["lineage.json", "manifest.json", "train_config.json"]


@pytest.mark.parametrize(
    ("action", "message"),
    [
        ("export", "pool: {missing}: no pool file there"),  # its POOL argument, not a training setting
        ("import", "{missing}: no such file"),  # not "unreadable Parquet file"
    ],
)
def test_a_pool_command_on_a_missing_path_names_itself_and_the_path(tmp_path, capsys, action, message):
    missing = tmp_path / "nothere.parquet"
    assert main(["pool", action, str(missing), "--out", str(tmp_path / "out.parquet")]) == 2
    assert capsys.readouterr().err.startswith(f"rlep pool {action}: error: {message.format(missing=missing)}")
    assert list(tmp_path.iterdir()) == []


def test_reader_refuses_a_file_that_is_not_a_pool(tmp_path):
    write_parquet_atomic(tmp_path / "pool.parquet", [{"problem_id": "p1", "response": "1"}])
    with pytest.raises(PoolError, match=f"{tmp_path / 'pool.parquet'}.*not a trajectory table"):
        read_pool(tmp_path)
    with pytest.raises(PoolError, match="no pool file there"):
        read_pool(tmp_path / "nowhere")
