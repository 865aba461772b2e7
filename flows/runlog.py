"""Quiet terminal, full log: what a run's libraries print goes to the run's log file, not the terminal.

vLLM, torch and transformers print from Python (warnings, loggers, tqdm bars on stderr) and from C++ and child
processes (NUMA binding lines, "Triton is installed"), which Python cannot filter. So while a run command works,
file descriptors 1 and 2 point at a log file: everything written to them, by any code or child process, lands there.
Python's `sys.stdout` is a copy of the terminal, so our own prints and progress bars (rich, on stdout) still show;
`sys.stderr` goes to the log, and of it only our own `warning:` lines are also shown on the terminal, as are the
`warning: ` records of the `rlep` loggers, by their message, whatever format and stream the logging configuration
gives them (Prefect's console, a user's own). The log lives in a temporary file until the run ends and is then added
to RUN_DIR/rlep.log, so a run refused on bad input creates nothing; when RUN_DIR exists already (a resumed run, a
long study's next session) the lines go straight to its rlep.log, so a run killed midway keeps them (the temporary
log of a run killed before it made its directory is removed by the next run).
`rlep --verbose` skips all of this.

Our own progress lines (training steps, evaluations, shards) are records of the `rlep` loggers.
`send_logs_to_prefect()` makes them reach the Prefect run they are logged in as well (its Logs tab in the
UI); the records still reach the root logger's handlers (Prefect's console on stderr, so in a CLI run
the run's rlep.log), while library output never goes to the UI.
"""

from __future__ import annotations

import io
import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rlep.data.fs import process_alive

LOG_FILE = "rlep.log"
TMP_PREFIX = "rlep-run-"  # temporary log of a run without its directory yet: rlep-run-PID-XXXX.log
RLEP_LOGGER = "rlep"  # parent of the loggers whose records are progress lines for the user (rlep.train, ...)
OUR_LINES = ("warning:", "  warning:")  # stderr lines of ours that the terminal shows as well
WARNING_RECORD = "warning: "  # how the message of a record of the `rlep` loggers for the user begins


class _Tee(io.TextIOBase):
    """sys.stderr during a run: every line to the log; our own warning lines to the terminal too."""

    def __init__(self, log: io.TextIOBase, terminal: io.TextIOBase) -> None:
        self.log, self.terminal, self.pending = log, terminal, ""
        self.released = False
        self.echo: str | None = None  # a warning record just shown (_OurWarnings): a handler's plain copy is not

    def release(self) -> None:
        """End of the run: later writes go to whatever sys.stderr is then. Handlers that kept this stream
        during the run (Prefect's console handler binds sys.stderr when it starts) must not write into the
        closed log, nor into a stream that was current at the end of the run and may be closed since."""
        self.released = True

    def _after(self) -> io.TextIOBase:
        return sys.stderr if sys.stderr is not self else sys.__stderr__

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if self.released:
            return self._after().write(text)
        self.log.write(text)
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            echo, self.echo = self.echo, None
            if line.startswith(OUR_LINES) and line != echo:
                self.terminal.write(line + "\n")
        return len(text)

    def show(self, message: str) -> None:
        """A warning record's message on the terminal. The root's handlers write the record next: a handler whose
        format is the message alone makes the next line the same, which is not shown again."""
        self.terminal.write(message + "\n")
        self.echo = message

    def flush(self) -> None:
        if self.released:
            self._after().flush()
            return
        self.log.flush()
        self.terminal.flush()

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._after().fileno() if self.released else self.log.fileno()


class _OurWarnings(logging.Handler):
    """During a run, on the `rlep` logger: each record whose message begins with `warning: ` is shown on the terminal
    by its message alone, whatever format the root's handlers give it (Prefect's console in a run through Prefect,
    or a user's own logging configuration) and wherever they write it (their stream may be the log's descriptor).
    A record no other handler takes is written into the run's stderr as logging's last resort would have (the log,
    and the terminal for a warning)."""

    def __init__(self, tee: _Tee) -> None:
        super().__init__(logging.WARNING)
        self.tee = tee

    def emit(self, record: logging.LogRecord) -> None:
        if not _other_handlers(record, self):
            self.tee.write(self.format(record) + "\n")  # the last resort's format: the message (and a traceback)
        elif (message := record.getMessage()).startswith(WARNING_RECORD):
            self.tee.show(message)


def _other_handlers(record: logging.LogRecord, mine: logging.Handler) -> bool:
    """Is there a handler besides `mine` on `record`'s way up (the walk `Logger.callHandlers` makes: with none,
    logging would have used its last resort)?"""
    logger: logging.Logger | None = logging.getLogger(record.name)
    while logger is not None:
        if any(h is not mine for h in logger.handlers):
            return True
        logger = logger.parent if logger.propagate else None
    return False


@contextmanager
def run_log(run_dir: Path | str | None) -> Iterator[Path | None]:
    """Send fd 1 and 2 to a log while the block runs, then append it to RUN_DIR/rlep.log if the run made
    its directory (straight into it when the directory exists already). Yields that path; `run_dir=None`: a
    temporary log only, removed at the end."""
    sys.stdout.flush()
    sys.stderr.flush()
    final = Path(run_dir) / LOG_FILE if run_dir is not None else None
    if final is not None and final.parent.is_dir():
        fd, tmp = os.open(final, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644), None
        start = os.lseek(fd, 0, os.SEEK_END)
    else:
        _drop_orphan_logs()
        fd, tmp = tempfile.mkstemp(prefix=f"{TMP_PREFIX}{os.getpid()}-", suffix=".log")
    saved_out, saved_err = os.dup(1), os.dup(2)
    old_out, old_err = sys.stdout, sys.stderr
    terminal_out = os.fdopen(os.dup(saved_out), "w", buffering=1, encoding="utf-8", errors="replace")
    terminal_err = os.fdopen(os.dup(saved_err), "w", buffering=1, encoding="utf-8", errors="replace")
    log = os.fdopen(os.dup(fd), "a", buffering=1, encoding="utf-8", errors="replace")
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    tee = _Tee(log, terminal_err)
    sys.stdout, sys.stderr = terminal_out, tee
    warnings_shown = _OurWarnings(tee)
    logging.getLogger(RLEP_LOGGER).addHandler(warnings_shown)
    try:
        yield final
    finally:
        logging.getLogger(RLEP_LOGGER).removeHandler(warnings_shown)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        tee.release()
        sys.stdout, sys.stderr = old_out, old_err
        os.dup2(saved_out, 1)
        os.dup2(saved_err, 2)
        if tmp is None:
            _kept_if_replaced(fd, start, final)
        else:
            _keep(fd, Path(tmp), final)
        for handle in (saved_out, saved_err, fd):
            os.close(handle)
        for stream in (terminal_out, terminal_err, log):
            stream.close()


def _kept_if_replaced(fd: int, start: int, final: Path) -> None:
    """A run that removed and made again its own directory wrote its lines into the removed log file: they are
    added to the new directory's log, at the end of the run (one killed after remaking its directory loses them)."""
    try:
        if final.stat().st_ino == os.fstat(fd).st_ino:
            return
    except FileNotFoundError:
        pass
    if final.parent.is_dir():
        with open(final, "ab") as dst:
            dst.write(os.pread(fd, os.fstat(fd).st_size - start, start))


def _drop_orphan_logs() -> None:
    """Temporary logs of runs killed before the end (SIGKILL, a lost machine) are never appended nor removed by
    their process: each later run removes those whose process is gone (the pid is in the name)."""
    for path in Path(tempfile.gettempdir()).glob(f"{TMP_PREFIX}*-*.log"):
        pid = path.name[len(TMP_PREFIX) :].split("-", 1)[0]
        try:  # only this user's (a shared /tmp holds others', which are theirs to remove)
            if pid.isdigit() and path.stat().st_uid == os.getuid() and not process_alive(int(pid)):
                path.unlink()
        except OSError:
            pass


def _keep(fd: int, tmp: Path, final: Path | None) -> None:
    """Append the temporary log (read from its open descriptor `fd`, so a /tmp cleaner cannot take it first) to
    `final` if its directory exists (the run got far enough to make it), then remove it."""
    try:
        if final is not None and final.parent.is_dir():
            with open(final, "ab") as dst:
                dst.write(os.pread(fd, os.fstat(fd).st_size, 0))
    finally:
        tmp.unlink(missing_ok=True)


def send_logs_to_prefect() -> None:
    """Forward records of the `rlep` loggers (INFO and up) to the Prefect flow or task run that logs them.

    Call it at the start of a flow or task; it is idempotent, per process, so a task that runs in another
    process (a Ray worker) calls it there too. The run is looked up when a record is emitted, from the
    emitting thread's Prefect context: concurrent tasks each get their own lines, and a record logged
    outside any run is not sent."""
    logger = logging.getLogger(RLEP_LOGGER)
    if not any(getattr(h, "rlep_run_logs", False) for h in logger.handlers):
        logger.addHandler(_run_log_handler())
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)


def flush_prefect_logs() -> None:
    """Send the records still queued for the Prefect API now: a Ray worker may be stopped right after its task."""
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()


def _run_log_handler() -> logging.Handler:
    from prefect.exceptions import MissingContextError
    from prefect.logging.handlers import APILogHandler

    class RunLogHandler(APILogHandler):
        """Prefect's API log handler, silent outside a run (a `--no-prefect` run logs the same lines)."""

        rlep_run_logs = True

        def handleError(self, record: logging.LogRecord) -> None:
            if isinstance(sys.exc_info()[1], MissingContextError):
                return
            super().handleError(record)

    return RunLogHandler(level=logging.INFO)
