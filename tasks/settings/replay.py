"""Replay settings, one model per strategy, chosen by `kind` (a discriminated union: a form per kind in
the Prefect UI, `--replay KIND` plus the kind's own flags on the command line)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, Field

from rlep.tasks.settings.paths import UserPath
from rlep.tasks.settings.strict import SETTINGS

_KIND = {"cli_flag": "replay"}


class _GroupedBatch(BaseModel):
    """A design whose step trains on its prompt groups (fresh, with replayed members or rows added)."""

    model_config = SETTINGS

    batch_from_buffer: ClassVar[bool] = False
    plans_prompts: ClassVar[bool] = False  # puts its own prompts in the step's generation (sync mode only)

    def trained_prompts(self, prompts_per_step: int, samples_per_prompt: int) -> float:
        """The step's batch counted in prompts (what mini_batch_prompts divides)."""
        return prompts_per_step


class NoReplayConfig(_GroupedBatch):
    """Plain GRPO: every step trains on its fresh rollouts only."""

    model_config = SETTINGS
    kind: Literal["none"] = Field("none", description="Replay strategy.", json_schema_extra=_KIND)


class RLEPReplayConfig(_GroupedBatch):
    """RLEP (Zhang et al. 2025, arXiv 2507.07451): each group = G fresh + M answers replayed from a fixed pool of
    verified successes for the same prompt; advantages over all G+M."""

    model_config = SETTINGS
    kind: Literal["rlep"] = Field("rlep", description="Replay strategy.", json_schema_extra=_KIND)
    pool: UserPath | None = Field(
        None,
        description="pool.parquet from `rlep collect`, a run directory holding one, a pool version directory, "
        "or a pool store (its latest version). Required for rlep (the pipeline fills in the pool it has just "
        "collected).",
    )
    replay_per_group: int = Field(
        2,
        ge=1,
        le=1024,
        description="M: replayed answers per group (paper: 2 with G=16), drawn uniformly without replacement.",
    )
    rescore: bool = Field(True, description="Re-check replayed answers with the current verifier (paper: yes).")
    follow: bool = Field(
        False,
        description="`pool` is a pool store: between steps, take its newest version (published by a scheduled "
        "re-collection while this run trains) instead of pinning the version found at the start. Every step records "
        "the "
        "version it replayed from (replay_pool_version); --resume continues with the version its checkpoint recorded. "
        "Beyond RLEP's paper, whose pool is collected once.",
    )
    refresh_every: int = Field(
        1, ge=1, le=1_000_000, description="follow: look for a newer version at most every this many steps."
    )


class FIFOReplayConfig(BaseModel):
    """FIFO replay (arXiv 2604.08706): every generated rollout goes into a first-in-first-out buffer of capacity
    N; each step trains on a batch drawn uniformly from the buffer, without removing. Generating fewer rollouts
    per step than the batch consumes is where the compute saving comes from."""

    model_config = SETTINGS
    kind: Literal["fifo"] = Field("fifo", description="Replay strategy.", json_schema_extra=_KIND)
    buffer_size: int = Field(
        1024, ge=1, le=10_000_000, description="N: rollouts the buffer holds; the oldest leave first."
    )
    replay_ratio: float = Field(
        0.25,
        ge=0,
        lt=1,
        description="1 - fresh / batch: the training batch is (rollouts generated this step) / (1 - replay_ratio) "
        "rollouts drawn from the buffer. Ignored when batch_size is set.",
    )
    batch_size: int | None = Field(
        None,
        ge=1,
        le=10_000_000,
        description="Rollouts trained per step, drawn from the buffer (e.g. the baseline's batch for a compute-matched "
        "comparison with fewer prompts_per_step); must split into whole mini-batches (mini_batch_prompts x "
        "samples_per_prompt rollouts) or fit in one. null = from replay_ratio, rounded to the nearest whole number "
        "of mini-batches when a training configuration is loaded (which then records it here): 32 prompts x 8 "
        "answers / (1 - 0.25) = 341.3 rollouts -> 320, five mini-batches of 64.",
    )
    fresh_anchored: bool = Field(
        False,
        description="Keep every rollout generated this step in the batch and draw only the rest from older ones "
        "(the prioritized paper's design); off = the paper's uniform draw over the whole buffer.",
    )
    positive_share: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Share of the draws reserved for correct rollouts (the paper's bias toward positive "
        "trajectories); 0 = unbiased.",
    )
    max_age: int | None = Field(
        None,
        ge=0,
        le=1_000_000,
        description="Rollouts more than this many policy versions old leave the buffer; null = only FIFO order.",
    )

    batch_from_buffer: ClassVar[bool] = True
    plans_prompts: ClassVar[bool] = False

    def batch_rollouts(self, n_fresh: int) -> int:
        """Rollouts trained per step: `batch_size`, or the fresh count / (1 - replay_ratio)."""
        return self.batch_size if self.batch_size is not None else round(n_fresh / (1 - self.replay_ratio))

    def trained_prompts(self, prompts_per_step: int, samples_per_prompt: int) -> float:
        """The batch counted in prompts' worth of rollouts (batch / G), so FIFO makes as many updates as a grouped
        design training on that many prompts."""
        return self.batch_rollouts(prompts_per_step * samples_per_prompt) / samples_per_prompt

    def in_whole_mini_batches(self, n_fresh: int, mini_batch_rollouts: int) -> FIFOReplayConfig:
        """This config with the batch that `replay_ratio` gives rounded to the nearest multiple of
        `mini_batch_rollouts` (batch_size set to it), so that it splits into whole updates as the fair-updates
        check asks; a batch_size the user set, or a batch that fits in one mini-batch, is kept as it is."""
        rows = self.batch_rollouts(n_fresh)
        if self.batch_size is not None or rows <= mini_batch_rollouts or rows % mini_batch_rollouts == 0:
            return self
        mini_batches = round(n_fresh / (1 - self.replay_ratio) / mini_batch_rollouts)  # of the unrounded batch
        return self.model_copy(update={"batch_size": mini_batches * mini_batch_rollouts})


class PrioritizedReplayConfig(_GroupedBatch):
    """Advantage-prioritized replay (arXiv 2606.04560): rollout-level buffer, age eviction, sampling by |advantage|,
    fresh-anchored batches."""

    model_config = SETTINGS
    kind: Literal["prioritized"] = Field("prioritized", description="Replay strategy.", json_schema_extra=_KIND)
    buffer_size: int = Field(
        1024,
        ge=1,
        le=10_000_000,
        description="N: most rollouts kept; after age eviction, the lowest priority leaves first.",
    )
    max_age: int = Field(4, ge=1, le=1_000_000, description="tau_max: rollouts older than this many steps are evicted.")
    priority_alpha: float = Field(
        1.0, ge=0, le=10, description="alpha: sampling probability ~ (|advantage| + eps)^alpha; 0 = uniform."
    )
    priority_eps: float = Field(1e-3, gt=0, le=1, description="eps: keeps every stored rollout sampleable.")
    replay_fraction: float = Field(
        0.25,
        ge=0,
        le=10,
        description="Replayed rollouts added on top of the fresh ones, as a fraction of the fresh count.",
    )
    replay_warmup_steps: int = Field(
        0, ge=0, le=1_000_000, description="Steps with no replay at the start (the buffer still fills)."
    )
    freshness_tau: float | None = Field(
        None,
        gt=0,
        le=1_000_000,
        description="Freshness-aware priorities (FreshPER, arXiv 2604.16918): each priority multiplied by "
        "exp(-age / tau), age in steps (policy versions) since the rollout was generated; null = off (the "
        "prioritized paper).",
    )


class ReuseReplayConfig(_GroupedBatch):
    """Response reuse (AR3PO, arXiv 2509.25808): a per-prompt bank of this run's own verified successes, filled
    from each step's fresh answers; a group is given up to M banked answers of its prompt from earlier steps, with
    advantages over G + M as RLEP computes them (tasks/replay/self_replay.py)."""

    model_config = SETTINGS
    kind: Literal["reuse"] = Field("reuse", description="Replay strategy.", json_schema_extra=_KIND)
    pool: UserPath | None = Field(
        None,
        description="Optional: seed the bank with a pool's verified answers (any path `--pool` takes) before step 1; "
        "null = the bank starts empty and holds only this run's answers. Seeded answers are re-scored when replayed.",
    )
    replay_per_group: int = Field(
        2, ge=1, le=1024, description="M: banked answers a group is given at most, drawn uniformly without replacement."
    )
    when: Literal["all-wrong", "always"] = Field(
        "all-wrong",
        description="all-wrong: only groups none of whose fresh answers is correct get banked answers (AR3PO's "
        "reuse); always: every group whose prompt has banked answers (RLEP's rule).",
    )
    max_per_prompt: int = Field(
        8, ge=1, le=1_000_000, description="Banked answers kept per prompt; beyond it the oldest leave first."
    )
    max_age: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="Banked answers more than this many steps in the bank leave it (pool-seeded ones count from "
        "step 0); null = only max_per_prompt bounds the bank.",
    )


class RefillReplayConfig(_GroupedBatch):
    """Zero-variance refill (TRL's GRPOWithReplayBuffer): groups whose rewards are all equal are replaced by whole
    past groups of high reward variance from a bounded buffer, so every prompt slot of a step carries gradient
    (tasks/replay/self_replay.py)."""

    model_config = SETTINGS
    kind: Literal["refill"] = Field("refill", description="Replay strategy.", json_schema_extra=_KIND)
    buffer_groups: int = Field(
        64,
        ge=1,
        le=1_000_000,
        description="Groups the buffer keeps (TRL's replay_buffer_size, default 64); over it the group with the "
        "lowest reward std leaves first (ties: the oldest).",
    )
    max_age: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="Groups more than this many steps old leave the buffer; null = only the capacity bounds it.",
    )


class ExGRPOReplayConfig(_GroupedBatch):
    """ExGRPO (Zhan et al. 2025, arXiv 2510.02245): once a batch's Pass@1 passes `start_accuracy`, a buffer of the
    run's successes of partially solved prompts, bucketed by success count; up to rho x prompts_per_step of a
    step's prompts are replayed ones (Gaussian bucket weights), each a group of its lowest-entropy stored
    trajectory (policy-shaped loss) + K-1 fresh answers (tasks/replay/exgrpo.py)."""

    model_config = SETTINGS
    kind: Literal["exgrpo"] = Field("exgrpo", description="Replay strategy.", json_schema_extra=_KIND)
    replay_ratio: float = Field(
        0.5,
        ge=0,
        le=1,
        description="rho: at most floor(rho x prompts_per_step) of a step's prompts are replayed from the buffer, in "
        "place of as many drawn ones (paper: 0.5; 0.25 and 0.75 worse, Table 6).",
    )
    start_accuracy: float = Field(
        0.35,
        ge=0,
        lt=1,
        description="Delayed start: collection and replay switch on (for good) after the first step whose fresh "
        "answers' Pass@1 exceeds this (paper: 0.35); 0 = on from step 1.",
    )
    bucket_mean: float = Field(
        0.5,
        ge=0,
        le=1,
        description="mu of the Gaussian bucket weights, as a share of K: weight exp(-(k - mu K)^2 / (2 sigma^2)) for "
        "the bucket of prompts with k of K successes (paper and code: 0.5; Table 3's hard-biased run: 0.25).",
    )
    bucket_sigma: float = Field(
        1.0,
        gt=0,
        le=1000,
        description="sigma of the bucket weights, in successes (the authors' code: 1 success, i.e. 1/K in rates; "
        "the paper's text writes sigma = 1 in rates, nearly uniform).",
    )
    shaping_beta: float = Field(
        0.1,
        gt=0,
        le=100,
        description="beta of the policy shaping f(w) = w / (w + beta) on the replayed trajectory's per-token ratio "
        "to its stored behaviour log-probs (paper: 0.1).",
    )
    buffer_trajectories: int | None = Field(
        None,
        ge=1,
        le=100_000_000,
        description="Most stored trajectories; over it the oldest stored leave first. null = unbounded, as published "
        "(entries leave only when their prompt is retired).",
    )

    plans_prompts: ClassVar[bool] = True


ReplayConfig = Annotated[
    NoReplayConfig
    | RLEPReplayConfig
    | FIFOReplayConfig
    | PrioritizedReplayConfig
    | ReuseReplayConfig
    | RefillReplayConfig
    | ExGRPOReplayConfig,
    Field(discriminator="kind"),
]
