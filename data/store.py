"""The experience store: one run directory holding trajectory shards, the experience pool and a manifest.

The directory's file names (trajectories/part-NNNNN.parquet, pool.parquet, manifest.json) are
data.run_layout.CollectRunLayout's.

Crash safety: every file is written to a temporary name in the same directory, fsynced and renamed
(data.fs.atomic_path), so a file under a final name is always complete. A run killed at
any moment (SIGKILL included) and restarted on the same directory sees exactly the shards that finished
(`completed_shards()`), rewrites none of them, and never counts a temporary file as a shard. Shard `i`
always holds the same problems (the caller fixes the sharding from its parameters), so a restart cannot
duplicate rows; `data.pool.build_pool` checks the row key anyway and refuses duplicates.

The pool's rules (which answers it keeps), how it is built from a store, and its versioned store live in
data.pool, which depends on this module and never the other way.
"""

from __future__ import annotations

import errno
import json
import os
import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rlep.data.fs import (
    NoWeightsError,
    file_sha256,
    package_versions,
    process_alive,
    weights_hash,
    write_parquet_atomic,
    write_text_atomic,
)
from rlep.data.run_layout import CollectRunLayout
from rlep.data.trajectory import (
    PROBLEM_KEY,
    TRAJECTORY_SCHEMA,
    as_trajectory_table,
    check_columns,
    to_table,
    with_optional_columns,
)

SHARD_PATTERN = re.compile(r"^part-(\d{5,})\.parquet$")
# data.fs names a temporary file `.{final name}.{pid}.tmp`.
TEMP_PATTERN = re.compile(r"^\..+\.(\d+)\.tmp$")


class StoreError(ValueError):
    """A run directory that cannot be used as asked; the message names the path."""


def check_directory_possible(directory: Path | str) -> None:
    """Refuse (StoreError naming it) a `directory` that could not be made or written, without making anything: a
    file in its place or on its path, or a nearest existing folder this process cannot write. For checks before
    other checks, which must leave nothing behind when they refuse."""
    directory = Path(directory)
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        where = "it" if existing == directory else f"{str(existing)!r}, on its path,"
        raise StoreError(f"output directory {str(directory)!r} cannot be made: {where} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise StoreError(f"output directory {str(directory)!r} is not writable: {os.strerror(errno.EACCES)}")


def ensure_writable(directory: Path | str) -> Path:
    """Create `directory` if needed and prove a file can be written there; returns it.

    Raises StoreError naming the directory otherwise. Meant to run before any generation, so a bad
    `--out` fails in a second rather than after an hour of sampling.
    """
    directory = Path(directory)
    probe = directory / f".rlep-write-probe.{os.getpid()}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as err:
        raise StoreError(f"output directory {str(directory)!r} is not writable: {err.strerror or err}") from None
    return directory


class ExperienceStore:
    """Reads and writes one run directory (see the module docstring for the layout).

    `run_id`, when given, is checked against every row written, so two runs cannot share a directory
    by accident; by convention it is the directory's name.
    """

    def __init__(self, root: Path | str, run_id: str | None = None):
        self.root = Path(root)
        self.run_id = run_id
        self.layout = CollectRunLayout(self.root)

    @property
    def trajectories_dir(self) -> Path:
        return self.layout.trajectories

    @property
    def pool_path(self) -> Path:
        """Where data.pool.build_pool writes this run's pool."""
        return self.layout.pool

    @property
    def manifest_path(self) -> Path:
        return self.layout.manifest

    def prepare(self) -> ExperienceStore:
        """Check the directory is writable, create it, and delete temporary files left by dead writers.

        A temporary file whose writer (the pid in its name) is still running is left alone: it may be a
        second process finishing a shard.
        """
        ensure_writable(self.root)
        self.trajectories_dir.mkdir(exist_ok=True)
        for directory in (self.root, self.trajectories_dir):
            for path in directory.iterdir():
                match = TEMP_PATTERN.match(path.name)
                if match and not process_alive(int(match.group(1))):
                    path.unlink(missing_ok=True)
        return self

    def shard_path(self, index: int) -> Path:
        """Final path of shard `index` (whether or not it exists)."""
        if index < 0:
            raise ValueError(f"shard index must be >= 0, got {index}")
        return self.layout.shard(index)

    def completed_shards(self) -> list[int]:
        """Indices of the shards on disk, sorted. Only final names count; temporary files never do."""
        if not self.trajectories_dir.is_dir():
            return []
        found = (SHARD_PATTERN.match(p.name) for p in self.trajectories_dir.iterdir())
        return sorted(int(m.group(1)) for m in found if m)

    def shard_paths(self) -> list[Path]:
        return [self.shard_path(i) for i in self.completed_shards()]

    def write_shard(self, index: int, rows: pa.Table | Sequence[Mapping[str, Any]]) -> Path:
        """Write shard `index` atomically (replacing it if present); returns its path.

        `rows` are trajectory rows or a table with the schema's columns. Raises StoreError if a row's
        `run_id` is not this store's.
        """
        table = as_trajectory_table(rows, f"shard {index}") if isinstance(rows, pa.Table) else to_table(rows)
        if self.run_id is not None and table.num_rows:
            other = pc.unique(pc.filter(table["run_id"], pc.not_equal(table["run_id"], self.run_id)))
            if len(other):
                raise StoreError(
                    f"{self.root}: shard {index} has rows of run {other[0].as_py()!r}, this store is run "
                    f"{self.run_id!r}"
                )
        return write_parquet_atomic(self.shard_path(index), table, schema=TRAJECTORY_SCHEMA)

    def read_trajectories(self, columns: Sequence[str] | None = None) -> pa.Table:
        """All completed shards, in shard order, as one table."""
        return read_trajectory_files(self.shard_paths(), columns)

    def write_manifest(
        self,
        *,
        parameters: Mapping[str, Any],
        model: str,
        model_dir: Path | str | None = None,
        timings: Mapping[str, float] | None = None,
        pool_stats: Mapping[str, int] | None = None,
        left_out: Mapping[str, int] | None = None,
    ) -> Path:
        """Write DIR/manifest.json atomically from the files now on disk; returns its path.

        `parameters` is the caller's full configuration (JSON-serialisable); `model_dir`, when given, is
        hashed with `weights_hash` (None is recorded otherwise). `timings` maps phase names to seconds; by
        convention `generate`, `verify`, `write`, and optionally `total` (wall time of the whole run; the
        sum of the phases is used when it is absent), which `data.inspect` turns into throughput and shares.
        `pool_stats` (`data.pool.build_pool`'s PoolStats as a dict) is recorded under `pool`, so the
        threshold and the dropped-row counts travel with the pool. `left_out` (reason -> count: rows of the
        problem source a collection left out) is recorded as given, None when not.
        """
        trajectories = self.read_trajectories([*PROBLEM_KEY, "correct", "response_token_ids"])
        pool = read_trajectory_files([self.pool_path], list(PROBLEM_KEY)) if self.pool_path.is_file() else None
        files = {}
        for path in [*self.shard_paths(), *([self.pool_path] if pool is not None else [])]:
            files[path.relative_to(self.root).as_posix()] = {
                "rows": pq.read_metadata(path).num_rows,
                "bytes": path.stat().st_size,
                "sha256": file_sha256(path),
            }
        manifest = {
            "run_id": self.run_id,
            "schema_version": TRAJECTORY_SCHEMA.metadata[b"rlep.schema_version"].decode(),
            "created_at": datetime.now(timezone.utc).isoformat(),
            "parameters": dict(parameters),
            "model": {"id": model, "weights_hash": _weights_hash(model_dir) if model_dir is not None else None},
            "packages": package_versions(),
            "counts": {
                "problems": count_problems(trajectories),
                "samples": trajectories.num_rows,
                "correct": pc.sum(trajectories["correct"].cast(pa.int64())).as_py() or 0,
                "generated_tokens": pc.sum(pc.list_value_length(trajectories["response_token_ids"])).as_py() or 0,
                "shards": len(self.completed_shards()),
                "pool_rows": pool.num_rows if pool is not None else None,
                "pool_problems": count_problems(pool) if pool is not None else None,
            },
            "files": files,
            "timings": dict(timings or {}),
            "pool": dict(pool_stats) if pool_stats is not None else None,
            "left_out": dict(left_out) if left_out is not None else None,
        }
        write_text_atomic(self.manifest_path, json.dumps(manifest, indent=2, sort_keys=False) + "\n")
        return self.manifest_path

    def read_manifest(self) -> dict[str, Any] | None:
        if not self.manifest_path.is_file():
            return None
        return json.loads(self.manifest_path.read_text(encoding="utf-8"))


def read_trajectory_files(paths: Sequence[Path], columns: Sequence[str] | None = None) -> pa.Table:
    """Trajectory Parquet files concatenated in order, checked against the schema.

    `columns` reads only those columns (after checking from the footer that each file has the whole
    schema), which keeps summaries of large runs from loading every token id.
    """
    names = list(columns) if columns is not None else list(TRAJECTORY_SCHEMA.names)
    target = pa.schema([TRAJECTORY_SCHEMA.field(name) for name in names], metadata=TRAJECTORY_SCHEMA.metadata)
    tables = []
    for path in paths:
        try:
            present = pq.read_schema(path).names
            check_columns(present, str(path))
            table = with_optional_columns(pq.read_table(path, columns=[n for n in names if n in present]))
        except (OSError, pa.ArrowInvalid) as err:
            raise StoreError(f"{path}: unreadable Parquet file: {err}") from None
        try:
            tables.append(table.select(names).cast(target))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
            raise StoreError(f"{path}: columns do not cast to the trajectory schema: {err}") from None
    return pa.concat_tables(tables) if tables else target.empty_table()


def count_problems(table: pa.Table) -> int:
    """Distinct (data_source, problem_id) pairs in a table holding both columns."""
    return table.select(list(PROBLEM_KEY)).group_by(list(PROBLEM_KEY), use_threads=False).aggregate([]).num_rows


def _weights_hash(model_dir: Path | str) -> str:
    try:
        return weights_hash(model_dir)
    except NoWeightsError as err:
        raise StoreError(str(err)) from None
