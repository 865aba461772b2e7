"""The worker pool: concurrency from threads, hard kills, crashes, and the limits workers run under."""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from rlep.tasks.settings.verifier import VerifierConfig
from rlep.verifiers import sandbox, verify, verify_batch
from rlep.verifiers.sandbox import shared_pool
from rlep.verifiers.worker import TIMER_SIGNAL, AnswerTimeout, _on_alarm, judge_with_limits

# Slow for seconds to hours depending on the machine, in steps the soft timer can interrupt.
SLOW_ANSWER = "\\boxed{10^{10^{9}}}"


def _batch(offset: int, size: int = 60) -> tuple[list[str], list[str], list[bool]]:
    responses, golds, expected = [], [], []
    for i in range(offset, offset + size):
        if i % 3 == 0:
            responses.append(f"\\boxed{{{i}}}")
            golds.append(str(i))
            expected.append(True)
        elif i % 3 == 1:
            responses.append(f"The answer is $\\frac{{{i}}}{{2}}$.")
            golds.append(f"{i / 2}")
            expected.append(True)
        else:
            responses.append(f"\\boxed{{(x+{i})^2}}")
            golds.append(f"x^2+{2 * i}x+{i * i + 1}")
            expected.append(False)
    return responses, golds, expected


def test_verify_batch_from_many_threads_at_once():
    # One thread also sends a slow answer: the others must not wait for it to finish first.
    def run(offset: int) -> tuple[list[bool], list[bool]]:
        responses, golds, expected = _batch(offset)
        if offset == 0:
            responses[0], golds[0], expected[0] = SLOW_ANSWER, "1", False
        verdicts = verify_batch(responses, golds, timeout_seconds=1.0, kill_grace_seconds=0.3)
        return [verdict.correct for verdict in verdicts], expected

    with ThreadPoolExecutor(max_workers=6) as threads:
        results = list(threads.map(run, range(0, 6 * 1000, 1000)))
    for got, expected in results:
        assert got == expected


def test_verify_works_in_the_main_thread_and_off_it():
    result: list = []
    thread = threading.Thread(target=lambda: result.append(verify("\\boxed{0.5}", "\\frac12")))
    thread.start()
    thread.join()
    assert result[0].correct
    assert verify("\\boxed{0.5}", "\\frac12").correct


def test_an_unresponsive_worker_is_killed_and_replaced(monkeypatch):
    # One worker, SIGSTOPped while it works on a slow answer: it can no more answer its own timer, nor use
    # CPU time. The pool waits for a worker short of CPU (a starved one), but not past _STARVED_FACTOR
    # budgets of wall-clock time (3 here, not 30, to keep the test short); then only its kill ends it.
    monkeypatch.setattr(sandbox, "_STARVED_FACTOR", 3)
    options = {"workers": 1, "timeout_seconds": 1.0, "kill_grace_seconds": 0.2}
    pool = shared_pool(VerifierConfig(**options))
    assert verify("\\boxed{1}", "1", **options).correct  # the worker is up
    (pid,) = pool.worker_pids()
    kills = pool.kills
    result: list = []
    caller = threading.Thread(target=lambda: result.append(verify(SLOW_ANSWER, "1", **options)))
    start = time.monotonic()
    caller.start()
    time.sleep(0.3)
    os.kill(pid, signal.SIGSTOP)
    caller.join(timeout=20)
    elapsed = time.monotonic() - start
    assert result and result[0].reason == "timeout" and not result[0].correct
    assert 3 * (1.0 + 0.2) <= elapsed < 3 * (1.0 + 0.2) + 1.0, elapsed
    assert result[0].cpu_seconds < 1.0  # killed for using no CPU, not for using its budget
    assert pool.kills == kills + 1
    assert verify("\\boxed{3/4}", "0.75", **options).correct  # the pool keeps working
    assert pool.worker_pids() != [pid]


def test_a_worker_starved_of_the_cores_past_its_budget_is_waited_for_and_judges_as_usual():
    # The worker is stopped (no CPU at all, as if other work took the cores) for longer than its whole
    # budget of timeout + grace in wall-clock time, while it holds an answer, then let go: the answer is
    # judged as on quiet cores, not timed out, and the worker is not killed. (With wall-clock limits, the
    # pool killed it at 0.7 s and blamed the answer: a verdict that depended on the machine's load.)
    options = {"workers": 1, "timeout_seconds": 0.5, "kill_grace_seconds": 0.2}
    pool = shared_pool(VerifierConfig(**options))
    assert verify("\\boxed{1}", "1", **options).correct  # the worker is up
    (pid,) = pool.worker_pids()
    kills = pool.kills
    os.kill(pid, signal.SIGSTOP)
    result: list = []
    caller = threading.Thread(target=lambda: result.append(verify("\\boxed{\\frac{3}{4}}", "0.75", **options)))
    start = time.monotonic()
    try:
        caller.start()
        time.sleep(2 * (0.5 + 0.2))
    finally:
        os.kill(pid, signal.SIGCONT)  # never leave the shared pool's worker stopped
    caller.join(timeout=20)
    assert time.monotonic() - start >= 2 * (0.5 + 0.2)
    assert result and result[0].correct and result[0].reason == "equal", result
    assert pool.kills == kills and pool.worker_pids() == [pid]


def test_a_slow_answer_times_out_within_the_limit():
    verdict = verify(SLOW_ANSWER, "2", timeout_seconds=0.5, kill_grace_seconds=0.3)
    assert verdict.reason == "timeout" and not verdict.correct
    # The CPU time it used, whatever the machine's load (the kernel's timer may fire a few per cent early).
    assert 0.9 * 0.5 <= verdict.cpu_seconds < 0.5 + 0.3 + 0.5
    assert verify("\\boxed{2}", "2").correct


def test_a_worker_that_dies_mid_answer_gives_crash_and_the_rest_still_run():
    options = {"workers": 1, "timeout_seconds": 5.0}
    pool = shared_pool(VerifierConfig(**options))
    verify("\\boxed{1}", "1", **options)
    (pid,) = pool.worker_pids()
    result: list = []
    responses = [SLOW_ANSWER, "\\boxed{2}", "\\boxed{3}"]
    caller = threading.Thread(target=lambda: result.append(verify_batch(responses, ["1", "2", "3"], **options)))
    caller.start()
    time.sleep(0.3)
    os.kill(pid, signal.SIGKILL)
    caller.join(timeout=15)
    slow, two, three = result[0]
    assert slow.reason == "crash" and not slow.correct
    assert two.correct and three.correct


def test_an_idle_worker_killed_from_outside_is_replaced():
    options = {"workers": 1}
    pool = shared_pool(VerifierConfig(**options))
    verify("\\boxed{1}", "1", **options)
    (pid,) = pool.worker_pids()
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.2)
    assert verify("\\boxed{5}", "5", **options).correct


def test_workers_run_under_the_memory_limit():
    options = {"workers": 1, "memory_limit_mb": 512}
    verify("\\boxed{1}", "1", **options)
    (pid,) = shared_pool(VerifierConfig(**options)).worker_pids()
    with open(f"/proc/{pid}/limits") as limits:
        line = next(line for line in limits if line.startswith("Max address space"))
    assert line.split()[3] == str(512 * 1024 * 1024)


def test_identical_pairs_are_judged_once():
    verdicts = verify_batch(["\\boxed{4}", "\\boxed{4}", "\\boxed{5}"], ["4", "4", "4"])
    assert verdicts[0] is verdicts[1]
    assert [verdict.correct for verdict in verdicts] == [True, True, False]


@pytest.fixture
def alarm_handler():
    previous = signal.signal(TIMER_SIGNAL, _on_alarm)
    yield
    signal.signal(TIMER_SIGNAL, previous)


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        (MemoryError, "memory"),
        (RecursionError, "parse-error"),
        (ValueError, "parse-error"),
        (AnswerTimeout, "timeout"),
    ],
)
def test_worker_turns_failures_into_verdicts(monkeypatch, alarm_handler, failure, reason):
    def fail(*args):
        raise failure

    monkeypatch.setattr("rlep.verifiers.judge.decide", fail)
    correct, extracted, got, seconds, cpu_seconds = judge_with_limits("\\boxed{1}", "1", VerifierConfig())
    assert (correct, extracted, got) == (False, "1", reason)


def _spin(seconds: float) -> None:
    """Python code that uses the CPU for `seconds` of wall-clock time (a long sympy computation, say)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_worker_soft_timeout_interrupts_python_code(monkeypatch, alarm_handler):
    monkeypatch.setattr("rlep.verifiers.judge.decide", lambda *args: _spin(5))
    start = time.process_time()
    result = judge_with_limits("\\boxed{1}", "1", VerifierConfig(timeout_seconds=0.1))
    assert result[2] == "timeout"
    assert 0.9 * 0.1 <= result[4] and time.process_time() - start < 1.0  # interrupted after 0.1 s of CPU time


def test_worker_soft_timeout_counts_cpu_time_not_waiting(monkeypatch, alarm_handler):
    # An answer whose check waits (as a worker does while other work has the cores) for longer than its
    # budget, using no CPU meanwhile, is judged, not timed out.
    monkeypatch.setattr("rlep.verifiers.judge.decide", lambda *args: (time.sleep(0.3), (True, "1", "equal"))[1])
    correct, extracted, reason, seconds, cpu_seconds = judge_with_limits(
        "\\boxed{1}", "1", VerifierConfig(timeout_seconds=0.1)
    )
    assert (correct, extracted, reason) == (True, "1", "equal")
    assert seconds >= 0.3 > 0.1 > cpu_seconds


def _worker_on(pool, response: str):
    """The pool's worker whose current chunk holds `response` first among its unreported answers."""
    for worker in list(pool._workers):
        chunk = worker.chunk
        if chunk is not None and chunk.reported < len(chunk.items) and chunk.items[chunk.reported][0] == response:
            return worker
    return None


@pytest.mark.timeout(120)
def test_sigkill_of_a_busy_worker_mid_batch_gives_crash_and_the_batch_and_the_next_go_on():
    # A dedicated pool size, so that no other test's workers are involved. The stuck answer's gold
    # "0" sorts first, so it is the first answer of the first chunk: killing the worker that holds
    # that chunk blames exactly that answer, whenever the kill lands.
    options = {"workers": 2, "timeout_seconds": 60.0, "chunk_size": 8, "memory_limit_mb": 1000}
    config = VerifierConfig(**options)
    pool = shared_pool(config)
    verify("\\boxed{1}", "1", **options)
    responses, golds, expected = _batch(1, 40)
    result: list = []
    caller = threading.Thread(
        target=lambda: result.append(verify_batch([SLOW_ANSWER, *responses], ["0", *golds], config=config))
    )
    caller.start()
    deadline = time.monotonic() + 60
    while (busy := _worker_on(pool, SLOW_ANSWER)) is None:
        assert time.monotonic() < deadline, "the stuck answer never reached a worker"
        time.sleep(0.01)
    killed = busy.process.pid
    os.kill(killed, signal.SIGKILL)
    caller.join(timeout=60)
    assert not caller.is_alive()
    stuck, *rest = result[0]
    assert stuck.reason == "crash" and not stuck.correct
    # The rest of the killed worker's chunk was re-queued: every other answer is decided as usual.
    assert [verdict.correct for verdict in rest] == expected
    assert {verdict.reason for verdict in rest} == {"equal", "not-equal"}
    # The worker was replaced and the next batch runs on a full pool.
    responses, golds, expected = _batch(100, 40)
    assert [v.correct for v in verify_batch(responses, golds, config=config)] == expected
    pids = pool.worker_pids()
    assert len(pids) == 2 and killed not in pids
