"""Raw rows of a problem source: a local JSONL / JSON / Parquet / CSV file, or a Hugging Face dataset.

Rows come back as plain dicts (Parquet struct columns as dicts, list columns as lists), exactly as the file
holds them; data/sources.py turns them into Problems. Every failure names the file (or dataset).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from rlep.data.columns import column_names

LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")
HF_PREFIX = "hf:"


class ProblemSourceError(ValueError):
    """A problem source that cannot be read as asked; the message names the file and the column."""


def file_rows(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise ProblemSourceError(f"{path}: no such file")
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            rows = pq.read_table(path).to_pylist()
        else:
            text = path.read_bytes().decode("utf-8")
            if suffix == ".csv":
                rows = list(csv.DictReader(text.splitlines()))
            elif suffix == ".json":
                loaded = json.loads(text)
                if not isinstance(loaded, list):
                    raise ProblemSourceError(f"{path}: expected a JSON list of objects")
                rows = loaded
            else:
                rows = [_json_line(path, n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    except UnicodeDecodeError as err:
        raise ProblemSourceError(f"{path}: not UTF-8 text (byte {err.start})") from None
    except ProblemSourceError:
        raise
    except Exception as err:  # pyarrow / json / OS errors: one message naming the file
        raise ProblemSourceError(f"{path}: unreadable ({type(err).__name__}: {err})") from None
    if not rows:
        raise ProblemSourceError(f"{path}: empty, no problems found")
    if not all(isinstance(row, dict) for row in rows):
        raise ProblemSourceError(f"{path}: expected one object (a mapping of columns) per row")
    return rows


def peek_columns(path: Path) -> list[str] | None:
    """The column paths of a file's first row, or None when it cannot be read (the load will say why)."""
    try:
        if path.suffix.lower() == ".parquet":
            import pyarrow.parquet as pq

            batch = next(pq.ParquetFile(path).iter_batches(batch_size=1), None)
            first = batch.to_pylist()[0] if batch is not None and batch.num_rows else None
        elif path.suffix.lower() == ".csv":
            with path.open(encoding="utf-8", newline="") as handle:
                first = dict.fromkeys(next(csv.reader(handle), []))
        else:
            first = file_rows(path)[0]
    except Exception:
        return None
    return column_names(first) if isinstance(first, dict) else None


def _json_line(path: Path, number: int, line: str) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise ProblemSourceError(f"{path}: line {number} is not valid JSON ({err.msg})") from None
    if not isinstance(row, dict):
        raise ProblemSourceError(f"{path}: line {number} is not a JSON object")
    return row


def hf_rows(name: str, subset: str | None, split: str) -> list[dict[str, Any]]:
    try:
        import datasets
    except ImportError as err:  # pragma: no cover - datasets is a dependency
        raise ProblemSourceError(f"hf:{name}: the `datasets` package is not installed") from err
    try:
        dataset = datasets.load_dataset(name, subset, split=split)
    except Exception as err:
        text = str(err)
        if "Config name is missing" in text:  # datasets' words when a dataset has several subsets
            choices = text.split("available configs:", 1)[-1].split("\n", 1)[0].strip()
            raise ProblemSourceError(
                f"hf:{name}: the dataset has several subsets, choose one with subset (--subset): {choices}"
            ) from None
        raise ProblemSourceError(
            f"hf:{name}: could not load {'subset ' + repr(subset) + ', ' if subset else ''}split {split!r} "
            f"({type(err).__name__}: {text.splitlines()[0] if text else ''}). "
            "The dataset must be in the local Hugging Face cache or reachable from this machine."
        ) from None
    rows = dataset.to_list()
    if not rows:
        raise ProblemSourceError(f"hf:{name}: split {split!r} is empty")
    return rows
