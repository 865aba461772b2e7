"""Replay settings, one model per strategy, chosen by `kind` (a discriminated union: a form per kind in
the Prefect UI, `--replay KIND` plus the kind's own flags on the command line)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

_KIND = {"cli_flag": "replay"}


class NoReplayConfig(BaseModel):
    """Plain GRPO: every step trains on its fresh rollouts only."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["none"] = Field("none", description="Replay strategy.", json_schema_extra=_KIND)


class RLEPReplayConfig(BaseModel):
    """RLEP (Zhang et al. 2025, arXiv 2507.07451): each group = G fresh + M answers replayed from a fixed pool of
    verified successes for the same prompt; advantages over all G+M."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["rlep"] = Field("rlep", description="Replay strategy.", json_schema_extra=_KIND)
    pool: Path | None = Field(
        None, description="pool.parquet from `rlep collect`, a run directory holding one, a pool version directory, "
        "or a pool store (its latest version). Required for rlep (the pipeline fills in the pool it has just collected)."
    )
    replay_per_group: int = Field(
        2, ge=1, le=1024, description="M: replayed answers per group (paper: 2 with G=16), drawn uniformly without replacement."
    )
    rescore: bool = Field(True, description="Re-check replayed answers with the current verifier (paper: yes).")


class FIFOReplayConfig(BaseModel):
    """FIFO replay (arXiv 2604.08706): the run's own rollouts go into a first-in-first-out buffer of capacity N;
    each step samples from it uniformly without removing."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["fifo"] = Field("fifo", description="Replay strategy.", json_schema_extra=_KIND)
    buffer_size: int = Field(1024, ge=1, le=10_000_000, description="N: rollouts the buffer holds; the oldest leave first.")
    replay_ratio: float = Field(
        0.25, ge=0, lt=1, description="Share of the training batch that is replayed: fresh / (1 - ratio) rollouts in all."
    )


class PrioritizedReplayConfig(BaseModel):
    """Advantage-prioritized replay (arXiv 2606.04560): rollout-level buffer, age eviction, sampling by |advantage|,
    fresh-anchored batches."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["prioritized"] = Field("prioritized", description="Replay strategy.", json_schema_extra=_KIND)
    buffer_size: int = Field(1024, ge=1, le=10_000_000, description="N: most rollouts kept; lowest priority leaves first.")
    max_age: int = Field(4, ge=1, le=1_000_000, description="tau_max: rollouts older than this many steps are evicted.")
    priority_alpha: float = Field(1.0, ge=0, le=10, description="alpha: sampling probability ~ (|advantage| + eps)^alpha; 0 = uniform.")
    priority_eps: float = Field(1e-3, gt=0, le=1, description="eps: keeps every stored rollout sampleable.")
    replay_fraction: float = Field(
        0.25, ge=0, le=10, description="Replayed rollouts added on top of the fresh ones, as a fraction of the fresh count."
    )
    replay_warmup_steps: int = Field(0, ge=0, le=1_000_000, description="Steps with no replay at the start (the buffer still fills).")


ReplayConfig = Annotated[
    NoReplayConfig | RLEPReplayConfig | FIFOReplayConfig | PrioritizedReplayConfig, Field(discriminator="kind")
]
