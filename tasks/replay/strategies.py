"""The four replay strategies. Each is small on purpose: the trainer calls `select` and `add` in one
visible line each, and everything else (scoring, advantages, the loss) is shared."""

from __future__ import annotations

import random
from collections import deque
from dataclasses import replace
from typing import Any

import numpy as np

from tasks.replay.base import Group, Rollout
from tasks.replay.config import FIFOReplayConfig, PrioritizedReplayConfig, RLEPReplayConfig


def age(rollout: Rollout, step: int) -> int:
    """Policy updates since `rollout` was generated: at step t the engine holds the weights of version t-1."""
    return (step - 1) - rollout.policy_version


def _as_replayed(rollout: Rollout) -> Rollout:
    return replace(rollout, origin="replay")


class NoReplay:
    """Plain GRPO: the fresh groups, unchanged."""

    name = "none"

    def select(self, fresh: list[Group], step: int) -> list[Group]:
        return fresh

    def add(self, fresh: list[Group], step: int) -> None:
        pass

    def stats(self) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class RLEPReplay:
    """RLEP: each fresh group gains up to M verified answers to the same prompt from a fixed pool.

    Paper-faithful defaults: replayed answers are drawn uniformly (without replacement within a group),
    re-scored by the verifier, and share the group's advantage statistics; the trainer recomputes their
    log-probs with the current policy, so without `is_correction` they are treated as on-policy.
    Prompts with no pooled answer keep their G fresh answers.
    """

    name = "rlep"

    def __init__(self, config: RLEPReplayConfig, pool: dict[str, list[Rollout]], seed: int = 0) -> None:
        self.config = config
        self.pool = pool
        self.rng = random.Random(seed)

    def select(self, fresh: list[Group], step: int) -> list[Group]:
        groups = []
        for group in fresh:
            candidates = self.pool.get(group.problem_id, [])
            picks = self.rng.sample(candidates, min(self.config.replay_per_group, len(candidates)))
            anchor = group.rollouts[0]
            replayed = [
                replace(
                    pick,
                    origin="replay",
                    prompt=anchor.prompt,
                    prompt_token_ids=anchor.prompt_token_ids,
                    reward=None if self.config.rescore else pick.reward,
                    correct=None if self.config.rescore else pick.correct,
                    advantage=None,
                )
                for pick in picks
            ]
            groups.append(Group(group.problem_id, group.rollouts + replayed))
        return groups

    def add(self, fresh: list[Group], step: int) -> None:
        pass  # the pool is fixed (collected in Phase I)

    def stats(self) -> dict[str, float]:
        return {"pool_problems": len(self.pool), "pool_answers": sum(len(v) for v in self.pool.values())}

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.getstate()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.setstate(state["rng"])


class FIFOReplay:
    """FIFO replay: every fresh rollout (with the advantage computed at its step) enters a buffer of capacity
    N, oldest out first; each step draws `ratio / (1 - ratio)` x (fresh count) rollouts uniformly, without
    removing them, so replayed rollouts are that share of the batch. Draws within a step are distinct."""

    name = "fifo"

    def __init__(self, config: FIFOReplayConfig, seed: int = 0) -> None:
        self.config = config
        self.buffer: deque[Rollout] = deque(maxlen=config.buffer_size)
        self.rng = random.Random(seed)

    def select(self, fresh: list[Group], step: int) -> list[Group]:
        n_fresh = sum(len(g.rollouts) for g in fresh)
        wanted = round(self.config.replay_ratio / (1 - self.config.replay_ratio) * n_fresh)
        picks = self.rng.sample(range(len(self.buffer)), min(wanted, len(self.buffer)))
        replayed = [_as_replayed(self.buffer[i]) for i in picks]
        return fresh + [Group(r.problem_id, [r]) for r in replayed]

    def add(self, fresh: list[Group], step: int) -> None:
        self.buffer.extend(r for g in fresh for r in g.rollouts if r.origin == "fresh")

    def stats(self) -> dict[str, float]:
        return {"buffer_size": len(self.buffer)}

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.getstate(), "buffer": list(self.buffer)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.setstate(state["rng"])
        self.buffer = deque(state["buffer"], maxlen=self.config.buffer_size)


class PrioritizedReplay:
    """Advantage-prioritized replay: a rollout-level buffer; groups whose rewards are all equal are not stored
    (their advantages are 0); rollouts older than tau_max policy updates are evicted; draws are without
    replacement with probability ~ (|A| + eps)^alpha; batches are fresh-anchored (all fresh rollouts, plus
    `replay_fraction` x fresh count replayed ones). Over capacity, the lowest-priority rollouts leave first."""

    name = "prioritized"

    def __init__(self, config: PrioritizedReplayConfig, seed: int = 0) -> None:
        self.config = config
        self.buffer: list[Rollout] = []
        self.rng = np.random.default_rng(seed)

    def priorities(self) -> np.ndarray:
        adv = np.array([abs(r.advantage or 0.0) for r in self.buffer], dtype=np.float64)
        return (adv + self.config.priority_eps) ** self.config.priority_alpha

    def evict(self, step: int) -> None:
        self.buffer = [r for r in self.buffer if age(r, step) <= self.config.max_age]

    def select(self, fresh: list[Group], step: int) -> list[Group]:
        self.evict(step)
        if step <= self.config.replay_warmup_steps or not self.buffer:
            return fresh
        n_fresh = sum(len(g.rollouts) for g in fresh)
        wanted = min(round(self.config.replay_fraction * n_fresh), len(self.buffer))
        if wanted == 0:
            return fresh
        p = self.priorities()
        picks = self.rng.choice(len(self.buffer), size=wanted, replace=False, p=p / p.sum())
        return fresh + [Group(self.buffer[i].problem_id, [_as_replayed(self.buffer[i])]) for i in picks]

    def add(self, fresh: list[Group], step: int) -> None:
        for group in fresh:
            rollouts = [r for r in group.rollouts if r.origin == "fresh"]
            rewards = {r.reward for r in rollouts}
            if len(rewards) > 1:  # zero reward variance: no signal, not stored
                self.buffer.extend(rollouts)
        if len(self.buffer) > self.config.buffer_size:
            keep = np.argsort(-self.priorities(), kind="stable")[: self.config.buffer_size]
            self.buffer = [self.buffer[i] for i in sorted(keep)]

    def stats(self) -> dict[str, float]:
        return {"buffer_size": len(self.buffer)}

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.bit_generator.state, "buffer": list(self.buffer)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.buffer = list(state["buffer"])
