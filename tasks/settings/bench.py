"""The settings of `rlep bench verify`, the verifier's benchmark (verifiers/bench.py)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from rlep.tasks.settings.paths import UserPath
from rlep.tasks.settings.strict import SETTINGS
from rlep.verifiers.bench_corpus import HOSTILE_SHARE


class VerifyBenchConfig(BaseModel):
    """Settings of the bench: `run_verify_bench`'s corpus and workers, or a `run_peer_bench` checkout."""

    model_config = SETTINGS

    pairs: int = Field(10_000, ge=1, description="Corpus size.")
    workers: int | None = Field(None, ge=1, description="Worker processes (none: the CPU count).")
    seed: int = Field(0, description="Corpus seed.")
    hostile_share: float = Field(HOSTILE_SHARE, ge=0, le=1, description="Share of hostile answers in the corpus, 0..1.")
    skip_math_verify: bool = Field(
        False,
        description="Do not time plain math-verify (for load tests); no speed-up or agreement then.",
        json_schema_extra={"cli_switch": True},
    )
    peer: UserPath | None = Field(
        None,
        description="Instead of the corpus: run Math-Verify's regression cases from a checkout of "
        "huggingface/Math-Verify at DIR and print the agreement.",
        json_schema_extra={"cli_metavar": "DIR"},
    )
    out: UserPath = Field(Path("bench/results"), description="Directory for the JSON result.")
