"""Worker processes that judge answers under hard limits, killed and replaced when they overrun.

Why processes: sympy and the LaTeX grammar can run for hours or exhaust memory on a hostile answer
(`9^{9^{9^9}}` evaluates a power with hundreds of millions of digits, in C, deaf to signals). Only a
separate process that can be killed bounds that. Each worker (verifiers.worker) runs under RLIMIT_AS and
interrupts itself when an answer has used `timeout_seconds` of its CPU time; this module kills it once it
has used `timeout_seconds + kill_grace_seconds` of CPU time since it last reported without coming back,
answers `timeout` for the stuck answer, re-queues the rest of its chunk and starts a replacement. Both
limits count CPU time, so a worker that other work starves of the cores is waited for, not blamed: a verdict
does not depend on how busy the machine is. A worker that has not used its budget after `_STARVED_FACTOR`
times that budget in wall-clock time (it got less than a thirtieth of a core, or none: stopped, or blocked in
the kernel) is killed all the same.

Design:

- One dispatcher thread per pool owns the workers and their pipes. Callers (`WorkerPool.run`) only put
  chunks on a queue and wait for their job's event, so any number of threads can call at once, and no
  caller ever runs parsing code. Nothing uses signals in the caller, so it works off the main thread
  (Prefect runs tasks in threads).
- Workers are fresh interpreters (`python -m rlep.verifiers.worker`) connected by a socket pair, not
  `multiprocessing` children: spawn and forkserver children re-run the caller's `__main__` script, which
  in a trainer imports torch (before the worker could set its memory limit) and fails outright in a
  script without an `if __name__ == "__main__":` guard. A replacement costs about a second of one core
  (imports and warm-up); the pool keeps serving with the other workers meanwhile.
- `shared_pool(config)` keeps one pool per (workers, memory limit), created lazily, reused by every call,
  closed at interpreter exit and forgotten in forked children.
"""

from __future__ import annotations

import atexit
import itertools
import math
import os
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path

from rlep.tasks.settings.verifier import VerifierConfig

# A worker that has not finished starting (interpreter + imports + warm-up, about a second) after this
# long is considered broken.
_START_TIMEOUT_SECONDS = 60.0
# Consecutive workers that die before becoming ready; past this the environment is broken (e.g. the
# memory limit is below what the interpreter needs) and the pool reports an error instead of looping.
_MAX_FAILED_STARTS = 5
# Each batch is cut into about this many chunks per worker, so workers finish at about the same time.
_CHUNKS_PER_WORKER = 4
# A busy worker that has not used its CPU budget (timeout + grace) is killed all the same after this many
# budgets of wall-clock time: a process that gets less than a thirtieth of a core for so long is stopped or
# stuck in the kernel rather than merely starved (a study beside the test suite at the lowest priority ran
# about 15 times slower than alone).
_STARVED_FACTOR = 30
_RECHECK_SECONDS = 0.05
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass
class _Job:
    """One `run` call: its result rows, filled in by the dispatcher."""

    results: list
    remaining: int
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def store(self, slot: int, row: tuple) -> None:
        if self.results[slot] is None:
            self.results[slot] = row
            self.remaining -= 1
            if self.remaining == 0:
                self.done.set()


@dataclass
class _Chunk:
    """Consecutive items of a job sent to one worker in one message."""

    job: _Job
    config: VerifierConfig
    slots: list[int]
    items: list[tuple[str, str]]
    reported: int = 0  # workers answer in order, so results so far are a prefix


# The directory holding the `verifiers` package, put on the worker's path so that it imports the same
# code as the caller even when the package is not installed.
_PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)


class _Worker:
    def __init__(self, memory_limit_mb: int):
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PACKAGE_ROOT, env.get("PYTHONPATH")]))
        command = [
            sys.executable,
            "-m",
            "rlep.verifiers.worker",
            str(theirs.fileno()),
            str(os.getpid()),
            str(memory_limit_mb),
        ]
        self.process = subprocess.Popen(command, pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL)
        theirs.close()
        self.conn = Connection(ours.detach())
        self.started_at = time.monotonic()
        self.ready = False
        self.chunk: _Chunk | None = None
        self.chunk_id = -1
        self.progress_at = 0.0
        self.progress_cpu: float | None = None

    def progressed(self) -> None:
        """The worker was sent a chunk or reported answers: its answer's budget starts again from here."""
        self.progress_at, self.progress_cpu = time.monotonic(), self.cpu_seconds()

    def cpu_seconds(self) -> float | None:
        """The CPU time (user + system) the worker has used so far, or None where it cannot be read (no /proc,
        or the process is gone)."""
        try:
            stat = Path(f"/proc/{self.process.pid}/stat").read_text()
        except OSError:
            return None
        fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime and stime, fields 14 and 15

    def deadline(self, now: float) -> float | None:
        """When the worker is due: it is killed at that time unless it reports meanwhile. A busy worker is due
        once it has used its CPU budget since it last reported, or has been given `_STARVED_FACTOR` budgets of
        wall-clock time without using it. Its CPU time is read only once the budget in wall-clock time has
        passed (one thread cannot use more CPU time than that), so a quick answer costs no read; where it
        cannot be read, the budget is counted in wall-clock time."""
        if not self.ready:
            return self.started_at + _START_TIMEOUT_SECONDS
        if self.chunk is None:
            return None
        budget = self.chunk.config.timeout_seconds + self.chunk.config.kill_grace_seconds
        wall = self.progress_at + budget
        used = self.cpu_seconds() if now >= wall and self.progress_cpu is not None else None
        if used is None:
            return wall
        left = budget - (used - self.progress_cpu)
        if left <= 0:
            return now
        # Checked again when it could have used the rest, at most every _RECHECK_SECONDS (the kernel counts CPU
        # time in ticks of 10 ms, so a sliver left must not wake the dispatcher again at once).
        return min(now + max(left, _RECHECK_SECONDS), self.progress_at + _STARVED_FACTOR * budget)


class WorkerPool:
    """`size` worker processes, each limited to `memory_limit_mb` of address space. Thread-safe."""

    def __init__(self, size: int, memory_limit_mb: int):
        self.size = size
        self.memory_limit_mb = memory_limit_mb
        self.kills = 0  # workers killed for overrunning, for tests and benchmarks
        self._lock = threading.Lock()
        self._queue: deque[_Chunk] = deque()
        self._pending: dict[int, _Job] = {}
        self._closing = False
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)
        self._workers: list[_Worker] = []
        self._failed_starts = 0
        self._chunk_ids = itertools.count()

    @property
    def usable(self) -> bool:
        return not self._closing and self._failure is None

    def run(self, pairs: list[tuple[str, str]], config: VerifierConfig) -> list[tuple]:
        """Judge every (response, gold) pair; rows are (correct, extracted, reason, seconds, cpu_seconds), in
        order."""
        if not pairs:
            return []
        job = _Job(results=[None] * len(pairs), remaining=len(pairs))
        size = max(1, min(config.chunk_size, math.ceil(len(pairs) / (self.size * _CHUNKS_PER_WORKER))))
        chunks = [
            _Chunk(job, config, list(range(start, min(start + size, len(pairs)))), pairs[start : start + size])
            for start in range(0, len(pairs), size)
        ]
        with self._lock:
            if not self.usable:
                raise RuntimeError("the verifier pool is closed or broken") from self._failure
            self._pending[id(job)] = job
            self._queue.extend(chunks)
            if self._thread is None:
                self._thread = threading.Thread(target=self._dispatch, name="verifier-pool", daemon=True)
                self._thread.start()
        self._wake()
        try:
            job.done.wait()
        finally:
            with self._lock:
                self._pending.pop(id(job), None)
        if job.error is not None:
            raise RuntimeError("the verifier pool failed") from job.error
        return job.results

    def close(self) -> None:
        """Stop the dispatcher and kill the workers; pending calls fail with RuntimeError."""
        with self._lock:
            self._closing = True
            thread = self._thread
        self._wake()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)

    def worker_pids(self) -> list[int]:
        """Process ids of the current workers (for tests and monitoring)."""
        return [worker.process.pid for worker in list(self._workers)]

    def _wake(self) -> None:
        try:
            os.write(self._wake_write, b"x")
        except (BlockingIOError, OSError):
            pass  # a full pipe already guarantees a wake-up; a closed one means we are shutting down

    def _dispatch(self) -> None:
        try:
            while True:
                with self._lock:
                    if self._closing:
                        break
                self._start_workers()
                self._assign_chunks()
                self._wait_and_handle()
                self._kill_overrunning()
        except BaseException as error:  # noqa: BLE001 - any failure here must reach the waiting callers
            self._failure = error
        finally:
            self._shutdown()

    def _start_workers(self) -> None:
        if self._failed_starts >= _MAX_FAILED_STARTS:
            raise RuntimeError(
                f"{self._failed_starts} verifier workers in a row died while starting; is "
                f"memory_limit_mb={self.memory_limit_mb} too small, or `python -m rlep.verifiers.worker` "
                "failing to import? (its error is on stderr)"
            )
        while len(self._workers) < self.size:
            self._workers.append(_Worker(self.memory_limit_mb))

    def _assign_chunks(self) -> None:
        for worker in list(self._workers):
            if not worker.ready or worker.chunk is not None:
                continue
            with self._lock:
                if not self._queue:
                    return
                chunk = self._queue.popleft()
            worker.chunk, worker.chunk_id = chunk, next(self._chunk_ids)
            worker.progressed()
            try:
                worker.conn.send((worker.chunk_id, chunk.config, chunk.items))
            except (OSError, ValueError):
                # The worker died between becoming ready and now; the chunk never started.
                worker.chunk = None
                with self._lock:
                    self._queue.appendleft(chunk)
                self._retire(worker, blame=None)

    def _wait_and_handle(self) -> None:
        now = time.monotonic()
        deadlines = [d for d in (worker.deadline(now) for worker in self._workers) if d is not None]
        timeout = max(0.0, min(deadlines) - now) if deadlines else None
        # A worker that dies closes its end of the socket, so its connection turns readable and recv()
        # raises EOFError: no separate process sentinel is needed.
        by_conn = {worker.conn: worker for worker in self._workers}
        for ready in wait([self._wake_read, *by_conn], timeout):
            if ready == self._wake_read:
                self._drain_wake_pipe()
            else:
                self._receive(by_conn[ready])

    def _drain_wake_pipe(self) -> None:
        try:
            while os.read(self._wake_read, 4096):
                pass
        except BlockingIOError:
            pass

    def _receive(self, worker: _Worker) -> None:
        try:
            while worker in self._workers and worker.conn.poll():
                message = worker.conn.recv()
                if message[0] == "ready":
                    worker.ready = True
                    self._failed_starts = 0
                elif message[0] == "results" and message[1] == worker.chunk_id and worker.chunk is not None:
                    self._record(worker, message[2])
        except (EOFError, OSError):
            if worker in self._workers:
                self._retire(worker, blame="crash")

    def _record(self, worker: _Worker, rows: list[tuple]) -> None:
        chunk = worker.chunk
        for position, *row in rows:
            chunk.job.store(chunk.slots[position], tuple(row))
            chunk.reported = position + 1
        worker.progressed()
        if chunk.reported == len(chunk.items):
            worker.chunk = None

    def _kill_overrunning(self) -> None:
        now = time.monotonic()
        for worker in list(self._workers):
            deadline = worker.deadline(now)
            if deadline is not None and now >= deadline:
                if worker.ready:
                    self.kills += 1
                self._retire(worker, blame="timeout" if worker.ready else None)

    def _retire(self, worker: _Worker, blame: str | None) -> None:
        """Kill `worker`; its current answer gets verdict `blame`, the rest of its chunk is re-queued."""
        self._workers.remove(worker)
        if not worker.ready:
            self._failed_starts += 1
        cpu = worker.cpu_seconds()  # what it used until now, read before the kill
        if worker.process.poll() is None:
            worker.process.kill()
        try:
            worker.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass  # SIGKILL was sent; a process stuck in the kernel is reaped whenever it ends
        worker.conn.close()
        chunk = worker.chunk
        if chunk is None or chunk.reported >= len(chunk.items):
            return
        position = chunk.reported
        if blame is not None:
            seconds = time.monotonic() - worker.progress_at
            used = cpu - worker.progress_cpu if cpu is not None and worker.progress_cpu is not None else 0.0
            chunk.job.store(chunk.slots[position], (False, None, blame, seconds, used))
            position += 1
        if position < len(chunk.items):
            rest = _Chunk(chunk.job, chunk.config, chunk.slots[position:], chunk.items[position:])
            with self._lock:
                self._queue.appendleft(rest)

    def _shutdown(self) -> None:
        for worker in list(self._workers):
            worker.chunk = None
            self._retire(worker, blame=None)
        with self._lock:
            self._closing = True
            self._queue.clear()
            jobs = list(self._pending.values())
        error = self._failure or RuntimeError("the verifier pool was closed")
        for job in jobs:
            job.error = error
            job.done.set()
        # The wake-up pipe stays open: a late close() may still write to it, and a closed descriptor
        # number could by then belong to another file.


_pools: dict[tuple[int, int], WorkerPool] = {}
_pools_lock = threading.Lock()


def shared_pool(config: VerifierConfig) -> WorkerPool:
    """The process-wide pool for `config`'s worker count and memory limit, started on first use."""
    key = (config.n_workers, config.memory_limit_mb)
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None or not pool.usable:
            pool = _pools[key] = WorkerPool(*key)
        return pool


def close_shared_pools() -> None:
    """Close every shared pool (registered with atexit; safe to call more than once)."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close()


def _forget_pools_in_child() -> None:
    # A forked child inherits pool objects whose threads and workers belong to the parent; it must
    # start its own rather than use (or, at exit, kill) those.
    global _pools_lock
    _pools.clear()
    _pools_lock = threading.Lock()


atexit.register(close_shared_pools)
os.register_at_fork(after_in_child=_forget_pools_in_child)
