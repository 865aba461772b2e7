"""Settings of the answer verifier.

`verifiers.verify(response, gold, **options)` validates `options` into a `VerifierConfig`, so every
keyword the API accepts is a field here, with its bounds.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rlep.tasks.settings.strict import SETTINGS


class VerifierConfig(BaseModel):
    """How answers are extracted and compared, and the hard limits every answer is checked under."""

    model_config = ConfigDict(**SETTINGS, frozen=True)

    timeout_seconds: float = Field(
        default=5.0,
        gt=0,
        le=600,
        description="CPU-time budget for checking one answer (the worker's user + system seconds, so that a "
        "verdict does not depend on how busy the machine is). The worker interrupts itself at this limit; if it "
        "does not come back (long C computations ignore signals) it is killed once it has used timeout_seconds + "
        "kill_grace_seconds. 5 s is math-verify's own (wall-clock) default.",
    )
    kill_grace_seconds: float = Field(
        default=0.5,
        ge=0.05,
        le=30,
        description="Extra CPU time after timeout_seconds before an unresponsive worker is killed and replaced (a "
        "worker that has not used timeout_seconds + kill_grace_seconds after 30 times that in wall-clock time is "
        "killed all the same).",
    )
    memory_limit_mb: int = Field(
        default=1024,
        ge=192,
        le=1 << 20,
        description="Address-space limit (RLIMIT_AS) of each worker process, in MiB. A worker with "
        "sympy and math-verify loaded maps about 70 MiB, so this is headroom for one answer.",
    )
    workers: int | None = Field(
        default=None,
        ge=1,
        le=512,
        description="Number of worker processes; None means os.cpu_count(). Workers are shared by all "
        "calls that ask for the same number and memory limit.",
    )
    max_response_chars: int = Field(
        default=100_000,
        ge=1,
        le=50_000_000,
        description="Responses longer than this are not read at all (reason `too-long`).",
    )
    max_answer_chars: int = Field(
        default=1_000,
        ge=1,
        le=100_000,
        description="Extracted answers longer than this are not parsed (reason `too-long`); real final "
        "answers are short, and parsing cost grows with length.",
    )
    fallback_last_number: bool = Field(
        default=True,
        description="When no boxed answer or answer phrase is found, take the last number in the "
        "response. Switch off to reward only explicitly marked answers.",
    )
    answer_format: Literal["any", "boxed"] = Field(
        default="any",
        description="Which written answers count. `any`: rlep's extraction (boxes, answer phrases, math "
        "spans, and the last number if fallback_last_number). `boxed`: only the last \\boxed{} of the "
        "whole response as verl's MATH scorer reads it (no </think> cut, no phrase, no last number, no "
        "joined boxes), and the answer must also pass that scorer's string check (is_equiv); an answer "
        "accepted in this mode is scored 1.0 by verl's math_reward.compute_score. For re-checking a "
        "pool before export (verifiers.strict).",
    )
    float_rounding: int = Field(
        default=6,
        ge=0,
        le=30,
        description="Decimal places to which a decimal answer is rounded when compared with an "
        "irrational value such as pi or sqrt(2) (passed to math-verify). Rational golds are always "
        "compared exactly, so 0.3333 != 1/3 whatever this is.",
    )
    chunk_size: int = Field(
        default=64,
        ge=1,
        le=10_000,
        description="Most answers sent to a worker in one message; batching amortises the "
        "inter-process round trip. Smaller chunks are used when a batch is small, to keep all "
        "workers busy.",
    )

    @property
    def n_workers(self) -> int:
        """The number of worker processes, with None resolved to the machine's CPU count."""
        return self.workers or os.cpu_count() or 1


def config_from_options(config: VerifierConfig | None, options: dict) -> VerifierConfig:
    """`config` (or the defaults) updated with keyword `options`, with a clear error for unknown names."""
    base = config if config is not None else VerifierConfig()
    if not options:
        return base
    known = set(VerifierConfig.model_fields)
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(
            f"unknown verifier option(s) {', '.join(map(repr, unknown))}; known options: {', '.join(sorted(known))}"
        )
    # pydantic's ValidationError is a ValueError and names the offending field and bound.
    return VerifierConfig.model_validate({**base.model_dump(), **options})
