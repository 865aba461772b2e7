"""Versioned experience pools: each re-collection adds its verified successes as a new pool version.

Layout of a pool store ROOT:

    ROOT/v0001/pool.parquet     the whole pool of that version (trajectory schema)
    ROOT/v0001/lineage.json     parent version, and every contribution so far: collection run, model,
                                 policy version, weights hash, rows added
    ROOT/v0002/...

A version directory appears only complete (written as a temporary directory, then renamed), and is never
changed afterwards: training that names `ROOT/v0001` replays the same answers whatever came later.
Training given ROOT itself takes the latest version.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from data.fs import write_parquet_atomic
from data.store import normalise_response, read_trajectory_files
from data.trajectory import TRAJECTORY_SCHEMA

VERSION_DIR = re.compile(r"^v(\d{4,})$")
POOL_FILE = "pool.parquet"
LINEAGE_FILE = "lineage.json"


class PoolStore:
    """A directory of immutable pool versions."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def versions(self) -> list[int]:
        if not self.root.is_dir():
            return []
        found = (VERSION_DIR.match(p.name) for p in self.root.iterdir() if (p / LINEAGE_FILE).is_file())
        return sorted(int(m.group(1)) for m in found if m)

    def version_dir(self, version: int) -> Path:
        return self.root / f"v{version:04d}"

    def latest(self) -> Path | None:
        versions = self.versions()
        return self.version_dir(versions[-1]) if versions else None

    def lineage(self, version: int) -> dict[str, Any]:
        return json.loads((self.version_dir(version) / LINEAGE_FILE).read_text(encoding="utf-8"))

    def publish(self, pool_file: Path, contribution: dict[str, Any]) -> Path:
        """A new version = the latest version's rows plus `pool_file`'s rows not already in it (same problem
        and same normalised answer), with `contribution` (run, model, ...) appended to the lineage."""
        latest = self.latest()
        new = read_trajectory_files([Path(pool_file)])
        if latest is not None:
            old = read_trajectory_files([latest / POOL_FILE])
            seen = set(zip(old["data_source"].to_pylist(), old["problem_id"].to_pylist(),
                           normalise_response(old["response"]).to_pylist()))  # fmt: skip
            keys = zip(new["data_source"].to_pylist(), new["problem_id"].to_pylist(), normalise_response(new["response"]).to_pylist())
            fresh_mask = pa.array([key not in seen for key in keys])
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
            "problems": len(pc.unique(pc.binary_join_element_wise(merged["data_source"], merged["problem_id"], "\x00"))),
            "contributions": [*parent["contributions"], {**contribution, "rows_added": added.num_rows}],
        }
        final = self.version_dir(version)
        tmp = self.root / f".{final.name}.{os.getpid()}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        write_parquet_atomic(tmp / POOL_FILE, merged, schema=TRAJECTORY_SCHEMA)
        (tmp / LINEAGE_FILE).write_text(json.dumps(lineage, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, final)
        return final


def describe_versions(root: Path | str) -> list[dict[str, Any]]:
    """One row per version: rows, problems, parent, the last contribution's run and model, rows it added."""
    store = PoolStore(root)
    rows = []
    for version in store.versions():
        lineage = store.lineage(version)
        last = lineage["contributions"][-1] if lineage["contributions"] else {}
        rows.append({
            "version": f"v{version:04d}", "rows": lineage["rows"], "problems": lineage["problems"],
            "parent": lineage["parent"], "created_at": lineage["created_at"], "added_by": last.get("run_dir"),
            "model": last.get("model"), "policy_version": last.get("policy_version"), "rows_added": last.get("rows_added"),
        })  # fmt: skip
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
