"""Atomic Parquet writes: a temporary file in the same directory, fsynced, then renamed into place, so a
reader (or a run killed mid-write) never sees a partial file under the final name."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


def write_parquet_atomic(path: Path, table: pa.Table | Sequence[dict[str, Any]], schema: pa.Schema | None = None) -> Path:
    """Write `table` (or rows) to `path` atomically; returns `path`."""
    path = Path(path)
    if not isinstance(table, pa.Table):
        table = pa.Table.from_pylist(list(table), schema=schema)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        pq.write_table(table, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def append_rows(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    """Append rows to a small Parquet table (read, concatenate, rewrite atomically)."""
    path = Path(path)
    new = pa.Table.from_pylist(list(rows))
    if path.exists():
        old = pq.read_table(path)
        new = pa.concat_tables([old, new], promote_options="permissive")
    return write_parquet_atomic(path, new)
