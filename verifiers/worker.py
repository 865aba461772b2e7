"""The worker process: judges chunks of answers under a memory limit and a per-answer soft timeout.

Started by verifiers.sandbox as `python -m rlep.verifiers.worker FD PARENT_PID MEMORY_LIMIT_MB`: a fresh
interpreter, so nothing of the caller's program (its `__main__`, torch, threads) is imported again, and
the memory limit is in force before sympy loads. It exits when the pool closes the socket, and is
killed by the kernel if the pool's process dies (PR_SET_PDEATHSIG).

Protocol over one socket wrapped in a `multiprocessing.connection.Connection`:

- worker -> pool, once at start: `("ready", pid, address_space_limit_bytes)`.
- pool -> worker: `(chunk_id, config, [(response, gold), ...])`, or None to exit.
- worker -> pool: `("results", chunk_id, [(position, correct, extracted, reason, seconds, cpu_seconds), ...])`,
  sent when a chunk is done and whenever more than FLUSH_SECONDS passed since the last message.

The flush rule is what lets the pool time each answer from outside: the answer a worker is stuck on
started at most FLUSH_SECONDS after the last message, so "last message + timeout + grace" never kills a
worker early, and the first unreported answer of the chunk is the one to blame.

Time and memory: RLIMIT_AS turns runaway allocation into MemoryError (reason `memory`); a profiling timer
(ITIMER_PROF, SIGPROF) interrupts Python code once the answer has used `timeout_seconds` of the worker's CPU
time, user and system (reason `timeout`). CPU time, not wall-clock time: on a machine busy with other work a
wall-clock budget would time out an answer that needs a fraction of it, so a verdict would depend on the load.
Long C computations (a huge integer power) ignore the timer; the pool kills the whole process for those.

This module imports only the standard library at the top; sympy and math-verify load after the
memory limit is set.
"""

from __future__ import annotations

import ctypes
import logging
import os
import resource
import signal
import sys
import time
from multiprocessing.connection import Connection

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>

FLUSH_SECONDS = 0.02
# The per-answer timer counts the process's CPU time (user + system) and signals SIGPROF when it runs out.
TIMER, TIMER_SIGNAL = signal.ITIMER_PROF, signal.SIGPROF
# A few pairs that pull sympy's and the LaTeX grammar's lazily loaded parts in before the first real
# answer, so that answer does not pay ~0.3 s of imports out of its timeout.
_WARM_UP = (("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\frac{1}{\\sqrt{2}}"), ("\\boxed{(x+1)^2}", "x^2+2x+1"))


class AnswerTimeout(BaseException):
    """Raised by the CPU timer's handler. A BaseException, so that libraries' `except Exception` let it pass."""


def _on_alarm(signum, frame):
    raise AnswerTimeout


def main(argv: list[str]) -> None:
    """`python -m rlep.verifiers.worker FD PARENT_PID MEMORY_LIMIT_MB`."""
    fd, parent_pid, memory_limit_mb = (int(arg) for arg in argv)
    _die_with_parent(parent_pid)
    serve(Connection(fd), memory_limit_mb)


def _die_with_parent(parent_pid: int) -> None:
    # A worker stuck in a C computation would otherwise outlive a crashed trainer.
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def serve(conn: Connection, memory_limit_mb: int) -> None:
    """Set limits, warm up, then judge chunks until the pool says stop or goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle.
    limit = memory_limit_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    signal.signal(TIMER_SIGNAL, _on_alarm)
    # math-verify warns once that its own timeouts are off; here the timer and the pool replace them.
    logging.getLogger("math_verify").setLevel(logging.ERROR)

    from rlep.tasks.settings.verifier import VerifierConfig

    warm_config = VerifierConfig(timeout_seconds=30)
    for response, gold in _WARM_UP:
        judge_with_limits(response, gold, warm_config)
    conn.send(("ready", os.getpid(), limit))

    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        chunk_id, config, items = message
        results = []
        last_flush = time.monotonic()
        for position, (response, gold) in enumerate(items):
            results.append((position, *judge_with_limits(response, gold, config)))
            now = time.monotonic()
            if now - last_flush > FLUSH_SECONDS or position == len(items) - 1:
                conn.send(("results", chunk_id, results))
                results = []
                last_flush = now


def judge_with_limits(response: str, gold: str, config) -> tuple:
    """Judge one pair as (correct, extracted, reason, seconds, cpu_seconds), never raising: the wall time it
    took and the CPU time it used, which is what its limit counts.

    An interruption or error becomes a verdict: the soft timeout (CPU time) -> `timeout`, MemoryError -> `memory`,
    anything else (RecursionError in the LaTeX grammar, a ValueError deep in sympy) -> `parse-error`.
    """
    from rlep.verifiers.judge import decide, find_answer  # already loaded by serve(); a dict lookup here

    start, start_cpu = time.perf_counter(), time.process_time()
    extracted = None
    try:
        signal.setitimer(TIMER, config.timeout_seconds)
        try:
            found = find_answer(response, config)
            extracted = found.answer
            correct, extracted, reason = decide(found, gold, config)
        finally:
            signal.setitimer(TIMER, 0)
    except AnswerTimeout:
        correct, reason = False, "timeout"
    except MemoryError:
        correct, reason = False, "memory"
    except Exception:
        correct, reason = False, "parse-error"
    return correct, extracted, reason, time.perf_counter() - start, time.process_time() - start_cpu


if __name__ == "__main__":
    main(sys.argv[1:])
