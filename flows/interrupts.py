"""What a Ctrl-C does to a command: one line naming it and exit code 130, from the script's first import on
(rlep.flows.entry) and in `cli.main`. Standard library only: the script imports it before anything else."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command Ctrl-C stopped


@contextmanager
def interrupts_noted() -> Iterator[Callable[[], bool]]:
    """Notes a SIGINT before it raises KeyboardInterrupt, for the caller to tell an interrupt from the error a
    library made of it: pydantic-core turns a KeyboardInterrupt that lands while it builds a model class into a
    SchemaError. For the main thread only, where Python's own handler is in place (not where SIGINT is ignored,
    as in a background job); that handler is put back after, unless something installed its own meanwhile, so
    that a command's own handling (asyncio's, say, which looks for Python's) is as it would be. Used inside
    itself, the inner use shares the outer's notes."""
    current = signal.getsignal(signal.SIGINT)
    if isinstance(getattr(current, "rlep_seen", None), list):  # already noting, further out
        yield lambda: bool(current.rlep_seen)
        return
    if threading.current_thread() is not threading.main_thread() or current is not signal.default_int_handler:
        yield lambda: False
        return

    def note(signum, frame):
        note.rlep_seen.append(signum)
        signal.default_int_handler(signum, frame)

    note.rlep_seen = []
    signal.signal(signal.SIGINT, note)
    try:
        yield lambda: bool(note.rlep_seen)
    finally:
        if signal.getsignal(signal.SIGINT) is note:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def interrupted(name: str) -> int:
    """The one line a Ctrl-C prints, and the exit code."""
    print(f"rlep {name}: interrupted", file=sys.stderr)
    _forget_the_interrupt()
    return EXIT_INTERRUPTED


def typed_name(argv: list[str]) -> str:
    """The command's name before the arguments are parsed: the first words that are not flags (`rlep`'s own flags
    take no value, so the first is the command)."""
    words = [word for word in argv if not word.startswith("-")]
    return " ".join(words[: 2 if words[:1] == ["bench"] else 1])


def _forget_the_interrupt() -> None:
    """Python 3.11 marks a KeyboardInterrupt that left code run by `exec` of a string as unhandled even when it is
    caught (Ctrl-C during an import, where dataclasses make their methods that way), and a module run by
    `python -m` then ends by SIGINT (exit status -2) instead of with its exit code; each exec of a string starts
    by clearing the mark."""
    exec("")  # noqa: S102 - an empty string: nothing runs
