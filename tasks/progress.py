"""The progress bar long stages show (rich), or nothing when disabled."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def progress_bar(enabled: bool, label: str, total: int, done: int = 0) -> Iterator[Callable[[str], None]]:
    """Yields `advance(info="")`, which moves the bar one unit and shows `info` beside it."""
    if not enabled:
        yield lambda info="": None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[info]}"),
    )
    with Progress(*columns) as bar:
        task = bar.add_task(label, total=total, completed=done, info="")
        yield lambda info="": bar.update(task, advance=1, info=info)
