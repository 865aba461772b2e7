"""The result of checking one response against one gold answer."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

Reason = Literal[
    "equal",  # the extracted answer is equivalent to the gold answer
    "not-equal",  # both sides were understood and they differ
    "unevaluated",  # the gold is a number and the answer a sum, difference or product still to be computed
    "no-answer",  # nothing answer-like was found in the response (or the box was empty)
    "timeout",  # checking overran `timeout_seconds` of CPU time; the worker was interrupted or killed
    "too-long",  # the response or the extracted answer exceeded its length limit
    "parse-error",  # the answer (or the gold) could not be read as mathematics
    "memory",  # the worker ran out of its address-space limit while checking
    "crash",  # the worker process died for another reason (a signal, a segfault in a C extension)
]

REASONS: tuple[Reason, ...] = Reason.__args__  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a response's final answer matches the gold answer, and why.

    `extracted` is the answer text found in the response (before normalisation), or None when nothing
    was found; `seconds` is the wall time spent on this answer inside a worker (0.0 when it was decided
    without one, e.g. a response over the length limit); `cpu_seconds` the worker's CPU time (user + system)
    on it, which is what `timeout_seconds` limits, so that a verdict does not depend on the machine's load
    (for an answer the pool killed, the CPU time since the worker last reported).
    """

    correct: bool
    extracted: str | None
    reason: Reason
    seconds: float
    cpu_seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)
