"""The experience pool's one home: building it from a collection run, the versioned pool store, resolving
what path names a pool, and the one schema-checked reader training uses (export / import in RLEP's layout:
data.rlep_format / data.rlep_import).

Building (RLEP, arXiv 2507.07451, section 4.2): of many samples per problem (64 at temperature 0.7, top-p
0.95 in the paper) keep the verified-correct ones, and keep a problem only when it has at least two valid
reasoning paths (`min_correct`, default 2 here too). The threshold counts verified-correct samples (how
reliably the policy solves the problem). The paper's pool keeps every verified answer, repeats included, so
M replayed answers are drawn from all of them; that is the default here. `dedupe=True` keeps each distinct
answer once per problem (see `normalise_response`) instead: on short-answer tasks, where correct samples are
mostly the same string, that leaves about one answer per problem and the effective M near 1.

A pool is a Parquet file of the trajectory schema named POOL_FILE, found as:

    RUN/pool.parquet            a collection run (`rlep collect`, data.store.ExperienceStore)
    ROOT/v0001/pool.parquet     version 1 of a pool store; ROOT/v0001/lineage.json records its parent
                                version and every contribution so far (collection run, model, policy
                                version, weights hash, rows added)
    ROOT/v0002/...

A version directory appears only complete (data.fs.atomic_dir) and is never changed afterwards: training
that names `ROOT/v0001` replays the same answers whatever came later. Training given ROOT itself takes the
latest version (and a training run pins the version it resolved at its start, see tasks.replay.factory).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from rlep.data.fs import atomic_dir, write_parquet_atomic, write_text_atomic
from rlep.data.run_layout import POOL_FILE, PoolVersionLayout
from rlep.data.store import ExperienceStore, StoreError, count_problems, read_trajectory_files
from rlep.data.trajectory import PROBLEM_KEY, ROW_KEY, TRAJECTORY_SCHEMA

VERSION_DIR = re.compile(r"^v(\d{4,})$")
PUBLISH_LOCK = ".publish.lock"


class PoolError(ValueError):
    """A pool that cannot be used as asked; the message names the file."""


@dataclass(frozen=True)
class PoolStats:
    """What `build_pool` kept and dropped, in rows unless named otherwise."""

    min_correct: int
    samples: int  # trajectory rows read
    correct: int  # of which verified correct
    problems: int  # distinct problems in the trajectories
    problems_with_correct: int  # problems with at least one correct answer
    pool_problems: int  # problems with at least `min_correct` correct answers
    pool_rows: int  # rows written to the pool
    duplicates: int  # correct rows dropped as repeats of an earlier answer to the same problem (dedupe only)
    below_min_correct: int  # correct rows dropped: their problem had fewer than `min_correct`
    # correct == pool_rows + duplicates + below_min_correct

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def normalise_response(response: pa.Array | pa.ChunkedArray) -> pa.ChunkedArray | pa.Array:
    """The text two answers are compared on for pool deduplication.

    Leading/trailing whitespace removed and every run of whitespace (spaces, tabs, newlines) collapsed
    to one space: samples that differ only in layout are the same reasoning path, and replaying one twice
    would double its weight. Case, punctuation and LaTeX spelling are kept: they change the tokens the
    policy is trained on.
    """
    return pc.replace_substring_regex(pc.utf8_trim_whitespace(response), pattern=r"\s+", replacement=" ")


def build_pool(store: ExperienceStore, min_correct: int = 2, dedupe: bool = False) -> PoolStats:
    """Write the run's POOL_FILE from its completed shards and return what was kept.

    Problems with fewer than `min_correct` correct rows are dropped; every correct row of the others is kept
    (RLEP's pool), or with `dedupe`, of the rows whose (data_source, problem_id, normalise_response(response))
    match, the first in shard-then-row order. The pool keeps shard-then-row order. Refuses (StoreError) trajectories
    in which a row key repeats,
    since that means a shard was written twice under different shard numbers.
    """
    if min_correct < 1:
        raise ValueError(f"min_correct must be >= 1, got {min_correct}")
    table = store.read_trajectories()
    _check_unique_keys(table, str(store.trajectories_dir))
    correct = table.filter(pc.equal(table["correct"], True))
    correct = correct.append_column("_row", pa.array(range(correct.num_rows), pa.int64()))
    keyed = correct.append_column("_norm", normalise_response(correct["response"]))
    distinct = keyed.group_by([*PROBLEM_KEY, "_norm"], use_threads=False).aggregate([("_row", "min")])
    per_problem = keyed.group_by(list(PROBLEM_KEY), use_threads=False).aggregate([("_row", "count")])
    qualified = per_problem.filter(pc.greater_equal(per_problem["_row_count"], min_correct))
    if dedupe:
        kept = distinct.join(qualified.select(list(PROBLEM_KEY)), list(PROBLEM_KEY), join_type="inner")["_row_min"]
    else:
        rows = keyed.select([*PROBLEM_KEY, "_row"])  # Arrow joins carry no list columns
        kept = rows.join(qualified.select(list(PROBLEM_KEY)), list(PROBLEM_KEY), join_type="inner")["_row"]
    pool = correct.take(pc.take(kept, pc.sort_indices(kept))).drop_columns(["_row"])
    duplicates = correct.num_rows - distinct.num_rows if dedupe else 0
    write_parquet_atomic(store.pool_path, pool, schema=TRAJECTORY_SCHEMA)
    return PoolStats(
        min_correct=min_correct,
        samples=table.num_rows,
        correct=correct.num_rows,
        problems=count_problems(table),
        problems_with_correct=per_problem.num_rows,
        pool_problems=qualified.num_rows,
        pool_rows=pool.num_rows,
        duplicates=duplicates,
        below_min_correct=correct.num_rows - pool.num_rows - duplicates,
    )


def _check_unique_keys(table: pa.Table, origin: str) -> None:
    counts = table.group_by(list(ROW_KEY), use_threads=False).aggregate([([], "count_all")])
    repeated = counts.filter(pc.greater(counts["count_all"], 1))
    if repeated.num_rows:
        example = {k: repeated[k][0].as_py() for k in ROW_KEY}
        raise StoreError(f"{origin}: {repeated.num_rows} row keys appear more than once, e.g. {example}")


class PoolStore:
    """A directory of immutable pool versions."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def versions(self) -> list[int]:
        if not self.root.is_dir():
            return []
        found = (VERSION_DIR.match(p.name) for p in self.root.iterdir() if PoolVersionLayout(p).lineage.is_file())
        return sorted(int(m.group(1)) for m in found if m)

    def version_dir(self, version: int) -> Path:
        return self.root / f"v{version:04d}"

    def collection_run(self, name: str) -> Path:
        """The directory of a collection run that publishes into this store (its shards, manifest and pool)."""
        return self.root / "runs" / name

    def latest(self) -> Path | None:
        versions = self.versions()
        return self.version_dir(versions[-1]) if versions else None

    def lineage(self, version: int) -> dict[str, Any]:
        return json.loads(PoolVersionLayout(self.version_dir(version)).lineage.read_text(encoding="utf-8"))

    def version_file(self, version: int) -> Path:
        """The pool file of `version`; a version pruned or never published is one clear error."""
        path = PoolVersionLayout(self.version_dir(version)).pool
        if not path.is_file():
            kept = ", ".join(f"v{v:04d}" for v in self.versions()) or "none"
            raise PoolError(
                f"pool store {self.root}: version v{version:04d} is not there (pruned, or never published); "
                f"the store holds {kept}"
            )
        return path

    @contextmanager
    def _publishing(self) -> Iterator[None]:
        """Hold the store's publish lock: publishers (scheduled re-collections, a pruning) take turns, so two
        of them never number the same version; readers need no lock (a version appears whole or not at all)."""
        import fcntl

        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / PUBLISH_LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def prune(self, keep: int) -> list[int]:
        """Remove every version but the newest `keep` (at least 1); returns the removed version numbers.

        A version leaves in one rename (out of `versions()` at once), then its files are deleted. A run that
        pinned a removed version fails on `--resume` with `version_file`'s message, never switches silently."""
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        with self._publishing():
            removed = self.versions()[:-keep]
            for version in removed:
                gone = self.root / f".pruned-v{version:04d}-{os.getpid()}"
                os.replace(self.version_dir(version), gone)
                shutil.rmtree(gone, ignore_errors=True)
        return removed

    def publish(self, pool_file: Path, contribution: dict[str, Any]) -> Path:
        """A new version = the latest version's rows plus `pool_file`'s rows not already in it (same problem
        and same normalised answer), with `contribution` (run, model, ...) appended to the lineage. Publishers
        take turns (a file lock), and the version directory appears complete or not at all."""
        with self._publishing():
            return self._publish(pool_file, contribution)

    def _publish(self, pool_file: Path, contribution: dict[str, Any]) -> Path:
        latest = self.latest()
        new = read_trajectory_files([Path(pool_file)])
        if latest is not None:
            old = read_trajectory_files([PoolVersionLayout(latest).pool])
            seen = set(
                zip(
                    old["data_source"].to_pylist(),
                    old["problem_id"].to_pylist(),
                    normalise_response(old["response"]).to_pylist(),
                )
            )
            keys = zip(
                new["data_source"].to_pylist(),
                new["problem_id"].to_pylist(),
                normalise_response(new["response"]).to_pylist(),
            )
            fresh_mask = pa.array([key not in seen for key in keys], type=pa.bool_())  # typed: an empty one too
            added = new.filter(fresh_mask)
            merged = pa.concat_tables([old, added])
            parent = self.lineage(self.versions()[-1])
        else:
            added, merged, parent = new, new, {"version": None, "contributions": []}
        version = (self.versions()[-1] + 1) if latest is not None else 1
        lineage = {
            "version": version,
            "parent": parent["version"],
            "created_at": datetime.now(timezone.utc).isoformat(),
            "rows": merged.num_rows,
            "problems": len(
                pc.unique(pc.binary_join_element_wise(merged["data_source"], merged["problem_id"], "\x00"))
            ),
            "contributions": [*parent["contributions"], {**contribution, "rows_added": added.num_rows}],
        }
        final = self.version_dir(version)
        if final.exists():
            raise PoolError(f"{final}: pool version already exists (versions are never rewritten)")
        with atomic_dir(final) as tmp:
            files = PoolVersionLayout(tmp)
            write_parquet_atomic(files.pool, merged, schema=TRAJECTORY_SCHEMA)
            write_text_atomic(files.lineage, json.dumps(lineage, indent=2) + "\n")
        return final


def describe_versions(root: Path | str) -> list[dict[str, Any]]:
    """One row per version: rows, problems, parent, the last contribution's run and model, rows it added."""
    store = PoolStore(root)
    rows = []
    for version in store.versions():
        lineage = store.lineage(version)
        last = lineage["contributions"][-1] if lineage["contributions"] else {}
        rows.append(
            {
                "version": f"v{version:04d}",
                "rows": lineage["rows"],
                "problems": lineage["problems"],
                "parent": lineage["parent"],
                "created_at": lineage["created_at"],
                "added_by": last.get("run_dir"),
                "model": last.get("model"),
                "policy_version": last.get("policy_version"),
                "rows_added": last.get("rows_added"),
            }
        )
    return rows


def resolve_pool_file(path: Path | str) -> Path:
    """The pool file a path names: a .parquet file; a directory holding pool.parquet (a collection run or
    a pool version); or a pool store (its latest version)."""
    path = Path(path)
    if path.is_dir() and not (path / POOL_FILE).is_file():
        latest = PoolStore(path).latest()
        if latest is not None:
            return latest / POOL_FILE
    return path / POOL_FILE if path.is_dir() else path


def resolve_pool_path(path: Path | str | None, setting: str = "replay.pool") -> Path:
    """`resolve_pool_file`, checked: raises PoolError, naming the `setting` that gave the path, unless it names an
    existing file."""
    if path is None:
        raise PoolError(
            f"{setting}: rlep replay needs a pool (a pool.parquet from `rlep collect`, its run directory, or a pool "
            "store)"
        )
    file = resolve_pool_file(path)
    if not file.is_file():
        raise PoolError(
            f"{setting}: {path}: no pool file there (a {POOL_FILE}, a run or version directory holding one, or a "
            f"pool store)"
        )
    return file


def read_pool(path: Path | str | None, columns: list[str] | None = None) -> tuple[Path, pa.Table]:
    """The pool a path names (see `resolve_pool_file`) and its rows, checked against the trajectory schema
    (`columns` reads only those). Raises PoolError naming the file."""
    file = resolve_pool_path(path)
    try:
        return file, read_trajectory_files([file], columns)
    except ValueError as err:  # StoreError or a schema mismatch, both naming the file
        raise PoolError(f"replay.pool: {err}") from None
