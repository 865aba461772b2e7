"""One training step's metrics row (`metrics.parquet`), computed from what the step produced, and the timer of
its named phases. Pure, so the trainer's step stays a list of phases."""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Any

import numpy as np

from rlep.data.rollout import Group, Rollout

PHASES = ("generate", "replay", "verify", "advantage", "train", "sync")


class PhaseTimer:
    """Wall time per named phase of one step."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def __call__(self, phase: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - start


def replay_age(replayed: list[Rollout], step: int, replay: Any, stats: dict[str, float]) -> tuple[float, float]:
    """Mean and max policy updates since this run generated its replayed answers (0 when none replayed); a pool's
    answers are another run's (NaN). A design whose rows' age is not their policy version reports its own in
    `stats` (`age_mean`, `age_max`: reuse counts a pool-seeded answer's age in the bank from step 0)."""
    if "age_mean" in stats:
        return float(stats.pop("age_mean")), float(stats.pop("age_max"))
    if not replayed:
        return 0.0, 0.0
    if not replay.needs.buffer:
        return float("nan"), float("nan")
    ages = [r.age(step) for r in replayed]
    return float(np.mean(ages)), float(max(ages))


def flat_share(groups: list[Group]) -> float:
    """The share of `groups` whose rewards are all equal (or that hold one answer): no GRPO signal."""
    return float(np.mean([len({r.reward for r in g.rollouts}) < 2 for g in groups])) if groups else 0.0


def step_row(
    step: int,
    fresh: list[Group],
    groups: list[Group],
    rollouts: list[Rollout],
    zero_std_frac: float,
    train_metrics: dict[str, float],
    timer: PhaseTimer,
    arrival: Any,
    replay: Any,
) -> dict[str, Any]:
    """The metrics of step `step`: rewards and accuracy of its fresh answers, what replay added (share, rows,
    effective M, age, accuracy, flat groups before and after it, the strategy's buffer), the update's metrics with
    its optimizer updates and trained tokens, phase times, staleness."""
    fresh_rollouts = [r for g in fresh for r in g.rollouts]
    staleness = [r.age(step) for r in fresh_rollouts]  # trainer's version (step - 1) minus the generating one
    replayed = [r for r in rollouts if r.origin == "replay"]
    # Effective M: replayed answers that joined a prompt's group (RLEP), per group that got any.
    joined = [sum(r.origin == "replay" for r in g.rollouts) for g in groups]
    with_replay = [m for m in joined if m]
    stats = dict(replay.stats())
    age_mean, age_max = replay_age(replayed, step, replay, stats)
    return {
        "step": step,
        "reward_mean": float(np.mean([r.reward for r in fresh_rollouts])),
        "accuracy": float(np.mean([bool(r.correct) for r in fresh_rollouts])),
        "zero_std_group_frac": zero_std_frac,  # after replay: over the groups whose advantages the step computed
        "zero_std_group_frac_fresh": flat_share(fresh),  # before replay: the fresh groups alone
        # RL-ZVP: the share of the step's groups that are flat and train with its entropy-shaped advantages
        "zvp_group_frac": float(np.mean([any(r.zero_variance for r in g.rollouts) for g in groups])) if groups else 0.0,
        "replay_share": len(replayed) / len(rollouts),
        "replay_rows": len(replayed),
        "replay_age_mean": age_mean,
        "replay_age_max": age_max,
        "replay_per_group_mean": float(np.mean(with_replay)) if with_replay else 0.0,
        "replay_prompt_share": len(with_replay) / len(groups),
        "fresh_share_trained": sum(r.origin == "fresh" for r in rollouts) / len(fresh_rollouts),
        "replay_accuracy": float(np.mean([bool(r.correct) for r in replayed])) if replayed else float("nan"),
        "batch_size": len(rollouts),
        "response_length_mean": float(np.mean([len(r.response_token_ids) for r in fresh_rollouts])),
        "lr": float("nan"),  # the trainer fills in the optimizer's rate
        "tokens_generated_total": 0,  # and the run's generated tokens so far
        **{k: float(v) for k, v in train_metrics.items()},
        "optimizer_updates": int(train_metrics["optimizer_updates"]),
        "tokens_trained": int(train_metrics["tokens_trained"]),
        **{f"time_{phase}": timer.seconds.get(phase, 0.0) for phase in PHASES},
        **{f"replay_{k}": float(v) for k, v in stats.items()},  # replay_buffer_size, replay_buffer_utilisation, ...
        "staleness_mean": float(np.mean(staleness)),
        "staleness_max": int(max(staleness)),
        "dropped_stale": arrival.dropped,
        "time_wait_generate": arrival.wait_seconds,  # the trainer idle, waiting for rollouts
        "time_wait_train": arrival.idle_seconds,  # the generator idle, waiting for work or weights
        "time_generator_busy": arrival.generate_seconds,
    }
