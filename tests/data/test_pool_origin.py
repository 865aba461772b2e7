"""A pool keeps where its problems came from: a standalone export of a pool collected from a verl file (DAPO-Math-17k)
writes that file's own rows, UUID index, ability and style included, so it appends to the training file (issue 34)."""

import json
from pathlib import Path

import datasets
import pyarrow.parquet as pq
from conftest import judged_row
from source_replicas import DAPO_ROWS, write_dapo_math_17k

from rlep.data.pool import PoolStore, build_pool
from rlep.data.pool_origin import pool_origin
from rlep.data.rlep_format import export_pool
from rlep.data.run_layout import POOL_FILE, CollectRunLayout
from rlep.data.sources import load_problems
from rlep.data.store import ExperienceStore
from rlep.flows.cli import main
from rlep.tasks.settings.collect import CollectConfig

# A third row the pool never solves: the export holds the pool's problems only, in the pool's order.
ROWS = [*DAPO_ROWS, ("What is $5+5$?", "10", "0c7f6a3e-5b1d-4e3e-9f0a-2d6a0f3b8c11")]


def _collected(tmp_path, source, solved):
    """A collection run over `source`, as `rlep collect` leaves it (its settings in manifest.json), whose pool
    holds two answers to each row numbered in `solved`, in that order."""
    config = CollectConfig.model_validate({"problems": {"source": str(source)}, "out": str(tmp_path / "run")})
    problems = load_problems(config.problems)
    store = ExperienceStore(config.out, run_id="run-d").prepare()
    answers = [(problems[i], f"... so the area is\nAnswer: {problems[i].answer}") for i in solved]
    store.write_shard(0, [judged_row(p, text, run_id="run-d", sample_index=j) for p, text in answers for j in (0, 1)])
    build_pool(store, min_correct=1)
    store.write_manifest(parameters=config.model_dump(mode="json"), model="tiny")
    return store


def test_a_dapo_pool_exports_as_the_source_files_own_rows(tmp_path):
    source = write_dapo_math_17k(tmp_path / "dapo-math-17k.parquet", ROWS)
    original = pq.read_table(source)
    store = _collected(tmp_path, source, solved=[1, 0])
    PoolStore(tmp_path / "pools").publish(store.pool_path, {"run_dir": str(store.root)})
    for pool in (store.root, store.pool_path, tmp_path / "pools"):  # a run, its pool file, a store's version
        report = export_pool(pool, tmp_path / "export.parquet")
        exported = pq.read_table(report.path)
        rows, before = exported.to_pylist(), original.to_pylist()
        assert [r["extra_info"]["index"] for r in rows] == [ROWS[1][2], ROWS[0][2]]  # the UUIDs, as strings
        assert exported.schema.field("extra_info").type == original.schema.field("extra_info").type
        for row, own in zip(rows, (before[1], before[0]), strict=True):
            candidates = row["reward_model"].pop("candidates")
            assert row == own  # data_source math_dapo, ability MATH, style, prompt, ground truth: all the file's
            assert candidates == [f"... so the area is\nAnswer: {own['reward_model']['ground_truth']}"] * 2
        assert (row["ability"], row["reward_model"]["style"]) == ("MATH", "rule-lighteval/MATH_v2")
        assert (report.layout, report.source, report.note) == ("source", source, None)
    # RLEP's recipe reads the training file and the pool's rows together.
    cache = str(tmp_path / "hf-cache")
    both = datasets.concatenate_datasets(
        [datasets.load_dataset("parquet", data_files=str(f), cache_dir=cache)["train"] for f in (source, report.path)]
    )
    assert len(both) == 5 and both[3]["extra_info"]["index"] == ROWS[1][2]
    assert both[0]["reward_model"]["candidates"] is None and both[4]["reward_model"]["candidates"]
    # rlep's own layout when asked for.
    own = pq.read_table(export_pool(store.root, tmp_path / "own.parquet", fields="rlep").path).to_pylist()
    assert [r["extra_info"]["index"] for r in own] == [0, 1]


def test_without_its_source_file_a_pool_exports_in_rleps_layout_saying_why(tmp_path, capsys):
    source = write_dapo_math_17k(tmp_path / "dapo-math-17k.parquet", ROWS)
    store = _collected(tmp_path, source, solved=[0])
    source.rename(tmp_path / "moved.parquet")
    out = tmp_path / "export.parquet"
    assert main(["pool", "export", str(store.root), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"its problem file {source} is not there)" in err and "relative path" not in err  # an absolute path
    assert pq.read_table(out).to_pylist()[0]["extra_info"]["index"] == 0


def test_a_missing_relative_source_is_said_to_be_read_from_the_working_directory(tmp_path, monkeypatch):
    source = write_dapo_math_17k(tmp_path / "dapo-math-17k.parquet", ROWS)
    store = _collected(tmp_path, source, solved=[0])
    manifest = CollectRunLayout(store.root).manifest
    saved = json.loads(manifest.read_text(encoding="utf-8"))
    saved["parameters"]["problems"]["source"] = source.name  # as a run started in tmp_path records it
    manifest.write_text(json.dumps(saved), encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert pool_origin(store.root / POOL_FILE).note == (
        f"its problem file {source.name} is not there (a relative path, read from here: {elsewhere})"
    )
    monkeypatch.chdir(tmp_path)
    assert pool_origin(store.root / POOL_FILE).file == Path(source.name)
