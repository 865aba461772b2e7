"""One writer per run directory: DIR/collect.lock (a collection) or DIR/train.lock (a training run) holds the pid of
the process writing into it.

Two collections into one directory would write the same shards; two trainings into one run directory would
interleave their metrics, evaluations and checkpoints (seen when a study was started again while a run of the
first one was still alive). A lock whose process is gone (killed, crashed) is taken over, so a rerun after a
kill resumes without a manual clean-up.
"""

from __future__ import annotations

import os
from pathlib import Path

from rlep.data.fs import process_alive
from rlep.data.store import StoreError

LOCK_FILE = "collect.lock"  # pid of the process collecting into the directory
TRAIN_LOCK_FILE = "train.lock"  # pid of the process training into the run directory


def take_lock(root: Path, name: str = LOCK_FILE, activity: str = "collected into") -> Path:
    """Claim DIR for this process: DIR/`name` holds its pid. Another live process's lock refuses, naming it and
    what it is doing (`activity`); a dead process's lock is taken over."""
    path = Path(root) / name
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                holder = int(path.read_text(encoding="utf-8").strip() or 0)
            except (OSError, ValueError):
                holder = 0  # unreadable or cut short: its writer died mid-write
            if holder == os.getpid():
                return path
            if holder and process_alive(holder):
                raise StoreError(
                    f"{root} is being {activity} by process {holder} (lock {path}); wait for it to finish, "
                    "or use another --out"
                ) from None
            path.unlink(missing_ok=True)  # stale: its process is gone
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(str(os.getpid()))
        return path


def release_lock(root: Path, name: str = LOCK_FILE) -> None:
    """Drop DIR/`name` if this process holds it."""
    path = Path(root) / name
    try:
        if int(path.read_text(encoding="utf-8").strip()) == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass
