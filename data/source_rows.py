"""Raw rows of a problem source: a local JSONL / JSON / Parquet / CSV file, or a Hugging Face dataset.

Rows come back as plain dicts (Parquet struct columns as dicts, list columns as lists), exactly as the file
holds them; data/sources.py turns them into Problems. Every failure names the file (or dataset).

An `hf:` dataset out of reach is one line at once: the hub's host is probed first (2 s at most), and when it
cannot be reached, or HF_HUB_OFFLINE is set, the dataset is read from the local cache only, so the hub client
does not retry for half a minute (5 retries with backoff, a warning line each) before failing.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rlep.data.columns import column_names

LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")
HF_PREFIX = "hf:"


class ProblemSourceError(ValueError):
    """A problem source that cannot be read as asked; the message names the file and the column."""


def file_rows(path: Path) -> list[dict[str, Any]]:
    if path.is_dir():
        raise ProblemSourceError(f"{path}: a directory, not a file of problems")
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
    unreachable = None if Path(name).is_dir() else hub_unreachable()  # a local dataset directory needs no hub
    try:
        with _cache_only(unreachable is not None), _quiet("huggingface_hub"):
            dataset = datasets.load_dataset(name, subset, split=split)
    except Exception as err:
        text = str(err)
        if "Config name is missing" in text:  # datasets' words when a dataset has several subsets
            choices = text.split("available configs:", 1)[-1].split("\n", 1)[0].strip()
            raise ProblemSourceError(
                f"hf:{name}: the dataset has several subsets, choose one with subset (--subset): {choices}"
            ) from None
        what = f"{'subset ' + repr(subset) + ', ' if subset else ''}split {split!r}"
        if unreachable is not None and isinstance(err, ConnectionError):  # datasets' words for "not cached"
            raise ProblemSourceError(
                f"hf:{name}: {what} is not in the local Hugging Face cache and the hub cannot be reached "
                f"({unreachable}); load it once on a machine that reaches the hub and copy its cache (HF_HOME), "
                "or give a local file as source"
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


PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


def hub_unreachable(timeout: float = 2.0) -> str | None:
    """Why the Hugging Face hub cannot be reached from here (offline mode set, or no connection to its host
    within `timeout` seconds), or None when it can. Behind a proxy the host is not probed (the client goes
    through the proxy): None."""
    import datasets
    from huggingface_hub import constants

    if constants.is_offline_mode() or datasets.config.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    if any(os.environ.get(name) for name in PROXY_VARIABLES):
        return None
    endpoint = urlsplit(constants.ENDPOINT)
    host, port = endpoint.hostname or "huggingface.co", endpoint.port or (80 if endpoint.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as err:
        return f"no connection to {host}:{port}: {err.strerror or err}"
    return None


@contextmanager
def _cache_only(on: bool) -> Iterator[None]:
    """While on, the hub client and datasets act as under HF_HUB_OFFLINE=1 (read at their import, so set here
    on the modules): the local cache only, no requests."""
    if not on:
        yield
        return
    import datasets
    from huggingface_hub import constants

    saved = constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = datasets.config.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE = saved


@contextmanager
def _quiet(logger_name: str) -> Iterator[None]:
    """The logger's warnings (the hub client's "Retrying in 8s" lines) off while the block runs: the load's
    outcome is reported in one line either way."""
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
