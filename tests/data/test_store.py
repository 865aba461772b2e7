import errno
import hashlib
import json
import os
import signal
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import judged_row

from rlep.data.fs import NoWeightsError, file_sha256, package_versions, weights_hash
from rlep.data.pool import build_pool, read_pool
from rlep.data.problem import Problem
from rlep.data.store import ExperienceStore, StoreError, check_directory_possible, ensure_writable
from rlep.data.trajectory import ROW_KEY, TRAJECTORY_SCHEMA, to_table

REPO = Path(__file__).resolve().parents[2]
WHEN = datetime(2025, 7, 1, tzinfo=timezone.utc)


def _row(problem_id, sample_index, correct, response="x", run_id="run-a", source="tiny-math/add"):
    problem = Problem(id=problem_id, problem=f"problem {problem_id}", answer="4", data_source=source, level=1)
    return judged_row(
        problem,
        response,
        correct,
        prompt=f"Q: problem {problem_id}\nA: ",
        response_token_ids=[1, 2],
        behaviour_logprobs=[-0.5, -0.5],
        extracted_answer="4" if correct else "5",
        run_id=run_id,
        model="tiny",
        sampling={"n": 4},
        sample_index=sample_index,
        created_at=WHEN,
    )


def _pool_fixture_rows():
    """Four problems x 4 samples with 0, 1, 2 and 4 correct answers; layout-only repeats included."""
    answers = {
        "p0": [(False, "a")] * 4,
        "p1": [(True, "\\boxed{4}"), (False, "b"), (False, "c"), (False, "d")],
        "p2": [(True, "so \\boxed{4}"), (False, "e"), (True, "  so   \\boxed{4}\n"), (False, "f")],
        "p3": [
            (True, "2+2=\\boxed{4}"),
            (True, "2+2=\\boxed{4}"),
            (True, "2 + 2 = \\boxed{4}"),
            (True, "2+2=\\boxed{4}\n"),
        ],
    }
    return [_row(pid, i, ok, text) for pid, samples in answers.items() for i, (ok, text) in enumerate(samples)]


def test_shards_are_named_counted_and_read_in_order(tmp_path):
    store = ExperienceStore(tmp_path / "run", run_id="run-a").prepare()
    rows = _pool_fixture_rows()
    assert store.completed_shards() == []
    assert store.write_shard(2, rows[8:]) == tmp_path / "run" / "trajectories" / "part-00002.parquet"
    store.write_shard(0, to_table(rows[:8]))
    assert store.completed_shards() == [0, 2]
    assert store.shard_path(12).name == "part-00012.parquet"
    table = store.read_trajectories()
    assert table.schema == TRAJECTORY_SCHEMA
    assert table["problem_id"].to_pylist() == [r["problem_id"] for r in rows]
    assert store.read_trajectories(["correct"]).column_names == ["correct"]


def test_temporary_files_never_count_and_dead_writers_leftovers_are_removed(tmp_path):
    store = ExperienceStore(tmp_path, run_id="run-a").prepare()
    store.write_shard(0, [_row("p", 0, True)])
    trajectories = store.trajectories_dir
    dead = trajectories / ".part-00001.parquet.99999999.tmp"  # beyond any pid: its writer is gone
    live = trajectories / f".part-00002.parquet.{os.getpid()}.tmp"  # a writer still running
    (trajectories / "part-00003.parquet.bak").write_bytes(b"junk")
    dead.write_bytes(b"PAR1 half a file")
    live.write_bytes(b"PAR1 half a file")
    assert store.completed_shards() == [0]
    store.prepare()
    assert not dead.exists() and live.exists()
    assert store.completed_shards() == [0]


def test_write_shard_refuses_rows_of_another_run_and_foreign_tables(tmp_path):
    store = ExperienceStore(tmp_path, run_id="run-a").prepare()
    with pytest.raises(StoreError, match="shard 0 has rows of run 'run-b', this store is run 'run-a'"):
        store.write_shard(0, [_row("p", 0, True), _row("p", 1, True, run_id="run-b")])
    with pytest.raises(ValueError, match=r"shard 1: not a trajectory table \(missing columns \['run_id'"):
        store.write_shard(1, pa.table({"x": [1]}))
    assert store.completed_shards() == []
    assert list(store.trajectories_dir.iterdir()) == []


def test_build_pool_keeps_every_correct_answer_of_problems_over_the_threshold(tmp_path):
    """RLEP's pool: every verified answer of a problem with >= min_correct of them, repeats included."""
    store = ExperienceStore(tmp_path, run_id="run-a").prepare()
    rows = _pool_fixture_rows()
    store.write_shard(0, rows[:6])
    store.write_shard(1, rows[6:])
    stats = build_pool(store, min_correct=2)
    assert (stats.pool_rows, stats.duplicates, stats.below_min_correct, stats.pool_problems) == (6, 0, 1, 2)
    assert pq.read_table(store.pool_path)["problem_id"].to_pylist() == ["p2", "p2", "p3", "p3", "p3", "p3"]


def test_build_pool_dedupe_keeps_distinct_correct_answers_of_problems_over_the_threshold(tmp_path):
    """The threshold counts correct samples; with dedupe the pool then keeps each distinct answer once."""
    store = ExperienceStore(tmp_path, run_id="run-a").prepare()
    rows = _pool_fixture_rows()
    store.write_shard(0, rows[:6])
    store.write_shard(1, rows[6:])
    stats = build_pool(store, min_correct=2, dedupe=True)
    assert stats.to_dict() == {
        "min_correct": 2,
        "samples": 16,
        "correct": 7,
        "problems": 4,
        "problems_with_correct": 3,
        "pool_problems": 2,  # p2 (two correct samples, one answer) and p3 (four samples, two answers)
        "pool_rows": 3,
        "duplicates": 3,  # p2: one layout repeat; p3: one exact repeat and one with a trailing newline
        "below_min_correct": 1,  # p1's single correct answer
    }
    assert stats.correct == stats.pool_rows + stats.duplicates + stats.below_min_correct
    pool = pq.read_table(store.pool_path)
    assert pool.schema == TRAJECTORY_SCHEMA
    assert pool["problem_id"].to_pylist() == ["p2", "p3", "p3"]
    assert all(pool["correct"].to_pylist())
    loose = build_pool(store, min_correct=1, dedupe=True)
    assert (loose.pool_rows, loose.pool_problems, loose.below_min_correct) == (4, 3, 0)
    assert pq.read_table(store.pool_path)["problem_id"].to_pylist() == ["p1", "p2", "p3", "p3"]


def test_pool_of_a_run_without_successes_is_an_empty_readable_file(tmp_path):
    store = ExperienceStore(tmp_path, run_id="run-a").prepare()
    store.write_shard(0, [_row("p", i, False) for i in range(3)])
    stats = build_pool(store)
    assert (stats.samples, stats.correct, stats.pool_rows, stats.pool_problems) == (3, 0, 0, 0)
    assert pq.read_table(store.pool_path).schema == TRAJECTORY_SCHEMA
    assert read_pool(store.pool_path)[1].num_rows == 0


def test_same_problem_id_in_two_data_sources_is_two_problems(tmp_path):
    # Ids are unique only within a source (CSV row numbers, say), so the pool keys on (data_source, problem_id).
    store = ExperienceStore(tmp_path, run_id="run-a").prepare()
    store.write_shard(0, [_row("7", i, True, f"answer {i}", source=source) for source in ("A", "B") for i in range(2)])
    stats = build_pool(store, min_correct=2)
    assert (stats.problems, stats.pool_problems, stats.pool_rows, stats.duplicates) == (2, 2, 4, 0)
    store.write_manifest(parameters={}, model="tiny")
    assert store.read_manifest()["counts"]["pool_problems"] == 2


def test_build_pool_refuses_duplicate_row_keys(tmp_path):
    store = ExperienceStore(tmp_path, run_id="run-a").prepare()
    store.write_shard(0, [_row("p", 0, True)])
    store.write_shard(1, [_row("p", 0, True)])  # e.g. a restart with a different shard size
    with pytest.raises(StoreError, match="1 row keys appear more than once"):
        build_pool(store)
    assert not store.pool_path.exists()


def _fake_model(directory: Path) -> Path:
    directory.mkdir()
    (directory / "model-00001-of-00002.safetensors").write_bytes(b"A" * 3_000_000)
    (directory / "model-00002-of-00002.safetensors").write_bytes(b"B" * 10)
    (directory / "config.json").write_text("{}")
    return directory


def test_weights_hash_covers_names_sizes_and_bytes_of_safetensors_only(tmp_path):
    model = _fake_model(tmp_path / "model")
    expected = hashlib.sha256()
    for name, content in [
        ("model-00001-of-00002.safetensors", b"A" * 3_000_000),
        ("model-00002-of-00002.safetensors", b"B" * 10),
    ]:
        expected.update(name.encode() + b"\0" + len(content).to_bytes(8, "little") + content)
    assert weights_hash(model) == f"sha256:{expected.hexdigest()}"
    (model / "config.json").write_text('{"changed": true}')
    assert weights_hash(model) == f"sha256:{expected.hexdigest()}"
    (model / "model-00002-of-00002.safetensors").write_bytes(b"B" * 9 + b"C")
    assert weights_hash(model) != f"sha256:{expected.hexdigest()}"
    (tmp_path / "empty").mkdir()
    with pytest.raises(NoWeightsError, match="has no \\*.safetensors files"):
        weights_hash(tmp_path / "empty")


def test_manifest_records_counts_checksums_versions_and_timings(tmp_path):
    store = ExperienceStore(tmp_path / "run", run_id="run-a").prepare()
    rows = _pool_fixture_rows()
    store.write_shard(0, rows[:10])
    store.write_shard(1, rows[10:])
    stats = build_pool(store, min_correct=2, dedupe=True)
    model = _fake_model(tmp_path / "model")
    timings = {"generate": 3.0, "verify": 1.0, "write": 0.5}
    path = store.write_manifest(
        parameters={"samples": 4, "seed": 0}, model="tiny", model_dir=model, timings=timings, pool_stats=stats.to_dict()
    )
    manifest = json.loads(path.read_text())
    assert manifest["run_id"] == "run-a"
    assert manifest["parameters"] == {"samples": 4, "seed": 0}
    assert manifest["model"] == {"id": "tiny", "weights_hash": weights_hash(model)}
    assert manifest["counts"] == {
        "problems": 4,
        "samples": 16,
        "correct": 7,
        "generated_tokens": 32,
        "shards": 2,
        "pool_rows": 3,
        "pool_problems": 2,
    }
    assert manifest["timings"] == timings
    assert manifest["pool"] == stats.to_dict()
    assert set(manifest["files"]) == {
        "trajectories/part-00000.parquet",
        "trajectories/part-00001.parquet",
        "pool.parquet",
    }
    for name, entry in manifest["files"].items():
        file = store.root / name
        assert entry["sha256"] == hashlib.sha256(file.read_bytes()).hexdigest() == file_sha256(file)
        assert entry["rows"] == pq.read_table(file).num_rows
        assert entry["bytes"] == file.stat().st_size
    assert [manifest["files"][n]["rows"] for n in sorted(manifest["files"])] == [3, 10, 6]
    assert manifest["packages"]["pyarrow"] == pa.__version__
    assert set(manifest["packages"]) == {"rlep", "torch", "transformers", "vllm", "prefect", "pyarrow", "math-verify"}
    assert datetime.fromisoformat(manifest["created_at"]).tzinfo is not None
    assert sorted(p.name for p in store.root.iterdir()) == ["manifest.json", "pool.parquet", "trajectories"]


def test_package_versions_are_null_when_missing(monkeypatch):
    import rlep.data.fs as store_module

    monkeypatch.setitem(store_module.TRACKED_PACKAGES, "not-a-package", ("rlep-no-such-distribution",))
    versions = package_versions()
    assert versions["not-a-package"] is None and versions["pyarrow"] == pa.__version__


def test_unwritable_output_dir_is_named_before_any_work(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(StoreError, match=f"output directory '{blocker / 'run'}' is not writable"):
        ExperienceStore(blocker / "run").prepare()
    assert ensure_writable(tmp_path / "fresh" / "run") == tmp_path / "fresh" / "run"
    assert list((tmp_path / "fresh" / "run").iterdir()) == []  # the probe is gone


def test_a_directory_that_could_not_be_made_is_refused_without_making_anything(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(StoreError, match=f"'{blocker}' cannot be made: it is a file$"):
        check_directory_possible(blocker)
    with pytest.raises(
        StoreError, match=f"'{blocker / 'a' / 'b'}' cannot be made: '{blocker}', on its path, is a file$"
    ):
        check_directory_possible(blocker / "a" / "b")
    check_directory_possible(tmp_path / "new" / "run")  # could be made: nothing is made to find out
    check_directory_possible(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_read_only_output_dir_is_named(tmp_path, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.geteuid() == 0:  # root writes through mode bits: the write is refused as the kernel would refuse it
        real_write = Path.write_bytes

        def refused(self, data):
            if self.parent == locked:
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))
            return real_write(self, data)

        monkeypatch.setattr(Path, "write_bytes", refused)
    with pytest.raises(StoreError, match=r"locked' is not writable: Permission denied$"):
        ensure_writable(locked)
    assert list(locked.iterdir()) == []


def test_files_load_with_pandas_and_datasets(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    import datasets

    store = ExperienceStore(tmp_path / "run", run_id="run-a").prepare()
    rows = _pool_fixture_rows()
    store.write_shard(0, rows[:8])
    store.write_shard(1, rows[8:])
    build_pool(store, min_correct=2, dedupe=True)
    frame = pd.concat([pd.read_parquet(p) for p in store.shard_paths()], ignore_index=True)
    assert list(frame.columns) == list(TRAJECTORY_SCHEMA.names) and len(frame) == 16
    assert list(frame.loc[0, "response_token_ids"]) == [1, 2]
    assert pd.read_parquet(store.pool_path)["problem_id"].tolist() == ["p2", "p3", "p3"]
    files = {"train": [str(p) for p in store.shard_paths()], "pool": str(store.pool_path)}
    loaded = datasets.load_dataset("parquet", data_files=files, cache_dir=str(tmp_path / "hf"))
    assert (loaded["train"].num_rows, loaded["pool"].num_rows) == (16, 3)
    assert loaded["train"].column_names == list(TRAJECTORY_SCHEMA.names)
    assert loaded["train"][0]["response_token_ids"] == [1, 2] and loaded["train"][0]["created_at"] is not None


# A collection-like writer: one shard of 3 problems x 4 samples per step, optionally sleeping between
# shards, optionally killing itself (SIGKILL) after shard CRASH_AT's temporary file is complete but
# before it is renamed into place, the worst moment for a crash.
WRITER = r"""
import os, signal, sys, time
from datetime import datetime, timezone
from rlep.data.problem import Problem
from rlep.data.store import ExperienceStore
from rlep.data.trajectory import trajectory_row

root, run_id, shards, sleep, crash_at = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
store = ExperienceStore(root, run_id).prepare()
done = store.completed_shards()
print("resume", done, flush=True)
if crash_at >= 0:
    real_replace = os.replace
    def dying_replace(src, dst):
        if str(dst).endswith(f"part-{crash_at:05d}.parquet"):
            os.kill(os.getpid(), signal.SIGKILL)
        real_replace(src, dst)
    os.replace = dying_replace
when = datetime(2025, 7, 1, tzinfo=timezone.utc)
for shard in range(shards):
    if shard in done:
        continue
    rows = []
    for p in range(3):
        problem = Problem(id=f"s{shard}-p{p}", problem="1+3", answer="4", data_source="tiny-math/add")
        for s in range(4):
            rows.append(trajectory_row(
                problem, "Q: 1+3\nA: ", response=f"answer {s}", response_token_ids=[s], behaviour_logprobs=[-1.0],
                finish_reason="stop", correct=s <= p, extracted_answer=str(s), verdict_reason="equal",
                reward=float(s <= p), run_id=run_id, policy_version=0, model="tiny", sampling={"n": 4},
                sample_index=s, created_at=when))
    store.write_shard(shard, rows)
    print("wrote", shard, flush=True)
    time.sleep(sleep)
print("finished", flush=True)
"""
SHARDS, ROWS_PER_SHARD = 6, 12


def _writer(root: Path, sleep: float, crash_at: int = -1) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root), "run-a", str(SHARDS), str(sleep), str(crash_at)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(root: Path) -> list[str]:
    restart = _writer(root, sleep=0.0)
    out, err = restart.communicate(timeout=60)
    assert restart.returncode == 0, err
    return out.splitlines()


def _assert_complete(root: Path) -> None:
    store = ExperienceStore(root)
    assert store.completed_shards() == list(range(SHARDS))
    assert sorted(p.name for p in store.trajectories_dir.iterdir()) == [f"part-{i:05d}.parquet" for i in range(SHARDS)]
    for path in store.shard_paths():
        assert pq.read_table(path).num_rows == ROWS_PER_SHARD  # every file complete and readable
    table = store.read_trajectories()
    assert table.num_rows == SHARDS * ROWS_PER_SHARD
    keys = set(zip(*(table[k].to_pylist() for k in ROW_KEY), strict=True))
    assert len(keys) == table.num_rows  # no row written twice
    assert build_pool(store, min_correct=1).pool_rows == SHARDS * (1 + 2 + 3)


def test_sigkill_between_shards_then_restart_writes_each_row_once(tmp_path):
    root = tmp_path / "run-a"
    writer = _writer(root, sleep=0.5)
    seen = []
    for line in writer.stdout:
        seen.append(line.strip())
        if line.startswith("wrote 2"):
            writer.send_signal(signal.SIGKILL)
            break
    writer.wait(timeout=30)
    assert writer.returncode == -signal.SIGKILL
    before = ExperienceStore(root).completed_shards()
    assert before[:3] == [0, 1, 2] and before == list(range(len(before)))
    lines = _finish(root)
    assert lines[0] == f"resume {before}"
    assert lines[1:] == [f"wrote {i}" for i in range(len(before), SHARDS)] + ["finished"]
    _assert_complete(root)


def test_sigkill_inside_a_shard_write_leaves_no_partial_shard(tmp_path):
    root = tmp_path / "run-a"
    writer = _writer(root, sleep=0.0, crash_at=3)
    out, _ = writer.communicate(timeout=60)
    assert writer.returncode == -signal.SIGKILL
    assert out.splitlines()[1:] == ["wrote 0", "wrote 1", "wrote 2"]
    store = ExperienceStore(root)
    leftovers = [p.name for p in store.trajectories_dir.iterdir() if not p.name.startswith("part-")]
    assert leftovers == [f".part-00003.parquet.{writer.pid}.tmp"]  # complete bytes, never renamed
    assert store.completed_shards() == [0, 1, 2]
    lines = _finish(root)
    assert lines == ["resume [0, 1, 2]", "wrote 3", "wrote 4", "wrote 5", "finished"]
    _assert_complete(root)
