"""Ending a process of ours without the interpreter's teardown, once its work is done.

A process that has imported vLLM holds some 700,000 objects and dozens of extension modules. When it ends, the
interpreter's teardown clears every module, collects and finalizes them, which took 2.4-2.8 s of CPU on 2 Xeon
cores (2026-11-29). A finished process needs none of that: an `rlep` command, an async run's generator process
that its trainer waits on, or a torchrun rank ends seconds sooner without it.

`run_then_exit(main)` ends the process as the interpreter does up to its teardown: non-daemon threads joined,
then every atexit handler registered since the call (Prefect's, multiprocessing's, ...) run, then the logging
handlers and standard streams flushed. Then it exits at once with main's code.

It does this only after `main` returned (a Ctrl-C that main turns into an exit code included). An exception out
of `main`, an uncaught Ctrl-C among them, or `sys.exit` inside it ends the process the usual way (a traceback, a
signal's exit status).

Handlers registered before the call would run after this one, so they are skipped; two standard-library ones
that a module's imports register are run here instead (logging's, multiprocessing's). Call it first thing in a
`__main__` block, before any other import registers one (tests/tasks/test_quick_exit.py checks the project's
entry points)."""

from __future__ import annotations

import atexit
import logging
import os
import sys
from collections.abc import Callable

RUN_HERE = {"logging.shutdown", "multiprocessing.util._exit_function"}  # the handlers exit_now runs itself


def run_then_exit(main: Callable[[], int | None]) -> int:
    """`main()`'s exit code (None is 0), for `sys.exit`; the teardown that would follow is skipped (see above)."""
    done: list[int] = []

    def exit_now() -> None:
        if not done:  # main raised: the interpreter's own ending
            return
        if "multiprocessing.util" in sys.modules:  # its exit handler: children joined, its finalizers run
            sys.modules["multiprocessing.util"]._exit_function()
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # closed, or its reader gone
                pass
        os._exit(done[0])

    atexit.register(exit_now)  # atexit runs last in, first out: this one after every handler registered later
    code = main() or 0
    done.append(code)
    return code
