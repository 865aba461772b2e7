"""Replay from the run itself: response reuse (`reuse`) and zero-variance refill (`refill`).

Both keep this run's own verified rollouts across steps (`needs.buffer`) and hand them to the step as members
of a prompt group whose advantages are computed in the step (not stored), so their log-probs are recomputed by
the current policy like every replayed row, and they generate nothing extra (no charged tokens beyond the
run's own). Both replay only what earlier steps stored: a step's answers enter the store in `mix`, after that
step's `join` has drawn. The trainer verifies the fresh answers before `join`, so a design can look at
their verdicts (which groups are all wrong, which are flat).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np

from rlep.data.rollout import Group, PoolKey, Rollout
from rlep.tasks.replay.base import FreshPrompts, ReplayNeeds
from rlep.tasks.settings.replay import RefillReplayConfig, ReuseReplayConfig


def _flatten(groups: list[Group]) -> list[Rollout]:
    return [r for g in groups for r in g.rollouts]


def is_flat(rollouts: list[Rollout]) -> bool:
    """The rewards are all equal (or there is one): no GRPO signal, as advantages.group_advantages decides."""
    return len({r.reward for r in rollouts}) < 2


def _age_stats(ages: list[int]) -> dict[str, float]:
    """Mean and max age of the rows replayed this step (0 when none, as step_metrics.replay_age)."""
    return {"age_mean": float(np.mean(ages)) if ages else 0.0, "age_max": float(max(ages)) if ages else 0.0}


@dataclass
class Banked:
    """One stored answer: the rollout (advantage cleared), the step whose `mix` stored it (0: seeded from a pool
    before step 1) and whether it has ever been replayed."""

    rollout: Rollout
    banked_at: int
    drawn: bool = False


class ReuseReplay(FreshPrompts):
    """Response reuse (AR3PO, arXiv 2509.25808).

    Paper: a prompt whose fresh answers all fail gives GRPO no signal; AR3PO reuses a correct answer the
    policy produced for that prompt earlier in training (stored per prompt) as a member of the group, so the
    failures get negative and the reused answer positive advantages.
    Here: a bank per (data_source, problem_id) of this run's verified successes, filled in `mix` from each
    step's fresh answers (correct ones only), optionally seeded from a pool file (`pool`). In `join`, a group
    whose fresh answers are all wrong (`when: all-wrong`), or every group (`when: always`, RLEP's rule), gets up
    to M = `replay_per_group` banked answers of its prompt, drawn uniformly without replacement from those
    banked at earlier steps; advantages over G + M as RLEP computes them (the joined answers share the group's
    statistics); the log-probs of the joined answers are recomputed by the current policy like every replayed
    row. The bank keeps at most `max_per_prompt` answers per prompt and drops answers more than `max_age` steps
    in it, oldest first.
    Departures: AR3PO reuses one answer per failed prompt with its own reweighting and adaptive rollout
    counts (not implemented: G is fixed here, and reused answers are weighted as fresh ones); M answers are
    drawn, not the newest; the bank keeps duplicate responses (the same text produced twice is banked twice);
    own answers keep the reward they were given when generated (the verifier and reward settings do not change
    within a run), pool-seeded ones are re-scored each time they are replayed; a seeded answer's age counts
    from step 0 (it entered the bank before step 1; its policy version is another run's), so the age reported
    for replayed rows (`replay_age_mean`, `replay_age_max`) is steps in the bank, which equals policy versions
    since generation for the run's own answers in sync mode (async mode generates a step's answers up to
    `max_staleness` versions earlier).
    """

    name: ClassVar[str] = "reuse"
    needs: ClassVar[ReplayNeeds] = ReplayNeeds(buffer=True)

    def __init__(
        self, config: ReuseReplayConfig, pool: dict[PoolKey, list[Rollout]] | None = None, seed: int = 0
    ) -> None:
        self.config = config
        self.rng = random.Random(seed)
        self.coverage = float("nan")  # share of training problems with a seeded answer (set by make_replay)
        self.bank: dict[PoolKey, list[Banked]] = {}
        for key, answers in (pool or {}).items():
            seeded = [replace(r, reward=None, correct=None, advantage=None) for r in answers]
            self.bank[key] = [Banked(r, banked_at=0) for r in seeded[-config.max_per_prompt :]]
        self.pool = dict(pool or {})  # what make_replay reports coverage from
        self._ages: list[int] = []

    def evict(self, step: int) -> None:
        """Drop answers more than `max_age` steps in the bank at `step`."""
        if self.config.max_age is None:
            return
        for key in list(self.bank):
            kept = [e for e in self.bank[key] if step - e.banked_at <= self.config.max_age]
            if kept:
                self.bank[key] = kept
            else:
                del self.bank[key]

    def join(self, fresh: list[Group], step: int) -> list[Group]:
        self.evict(step)
        self._ages = []
        groups = []
        for group in fresh:
            anchor = group.rollouts[0]
            due = self.config.when == "always" or not any(r.correct for r in group.rollouts)
            banked = [e for e in self.bank.get((anchor.data_source, anchor.problem_id), []) if e.banked_at < step]
            picks = self.rng.sample(banked, min(self.config.replay_per_group, len(banked))) if due else []
            for pick in picks:
                pick.drawn = True
                self._ages.append(step - pick.banked_at)
            joined = [
                replace(
                    pick.rollout,
                    origin="replay",
                    prompt=anchor.prompt,
                    prompt_token_ids=anchor.prompt_token_ids,
                    advantage=None,
                )
                for pick in picks
            ]
            groups.append(Group(group.problem_id, group.rollouts + joined))
        return groups

    def mix(self, groups: list[Group], step: int) -> list[Rollout]:
        """Bank this step's correct fresh answers (replayable from the next step on); train on every group member."""
        for r in _flatten(groups):
            if r.origin == "fresh" and r.correct:
                key = (r.data_source, r.problem_id)
                self.bank.setdefault(key, []).append(Banked(replace(r, advantage=None), banked_at=step))
                del self.bank[key][: -self.config.max_per_prompt]  # the oldest leave first
        self.evict(step + 1)  # what expires before the next draw
        return _flatten(groups)

    def stats(self) -> dict[str, float]:
        entries = [e for answers in self.bank.values() for e in answers]
        return {
            "buffer_size": len(entries),
            "buffer_prompts": len(self.bank),
            "buffer_utilisation": float(np.mean([e.drawn for e in entries])) if entries else float("nan"),
            **_age_stats(self._ages),
        }

    def state_dict(self) -> dict[str, Any]:
        bank = {key: [(e.rollout, e.banked_at, e.drawn) for e in answers] for key, answers in self.bank.items()}
        return {"rng": self.rng.getstate(), "bank": bank}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.setstate(state["rng"])
        self.bank = {key: [Banked(*entry) for entry in answers] for key, answers in state["bank"].items()}


@dataclass
class StoredGroup:
    """One stored group: its rollouts (advantages cleared), their unbiased reward std, the step that stored it,
    whether it has ever been replayed."""

    rollouts: list[Rollout]
    std: float
    stored_at: int
    drawn: bool = False


class RefillReplay(FreshPrompts):
    """Zero-variance refill (TRL's experimental GRPOWithReplayBuffer, trl/experimental/grpo_with_replay_buffer).

    TRL: groups whose rewards have zero standard deviation carry no GRPO signal; a buffer of
    `replay_buffer_size` past groups, scored by their reward std and kept highest first, supplies groups that
    replace them, sampled with probability proportional to the score, so the batch keeps its size and every
    slot carries gradient. TRL adds the step's non-flat groups to the buffer before it draws, and a new group
    whose score only ties the lowest stored one is not added.
    Here: in `join` (after the fresh answers are verified), each flat fresh group (all rewards equal) is replaced
    by a whole group drawn from the buffer, without replacement within a step, with probability proportional to
    its reward std; the step keeps its prompt count (a flat group stays when the buffer has too few groups stored
    at earlier steps). In `mix`, the step's non-flat fresh groups enter the buffer; over `buffer_groups`, the
    lowest std leaves first (ties: the oldest); `max_age` evicts old groups first.
    Replayed rows carry origin="replay" and their policy version (so their age).
    Related, not implemented: POPO (arXiv 2606.01281) also replaces zero-variance groups with stored off-policy
    groups, but chooses them by recency and quality and corrects them with decoupled importance sampling.
    Departures:
    - TRL stores the group's advantages and old log-probs and replays them as stored; here advantages are
      recomputed over the replayed group's own rewards under the step's rule (GRPO's, or AsymRE's r - V: the same
      values while the rule is unchanged) and log-probs are recomputed by the current policy, like every replayed
      row (`loss.is_correction` can weight them against their stored behaviour log-probs);
    - TRL's score mixes std and advantages, here it is the std alone; `max_age` is not TRL's;
    - a step's groups are stored after its draw (TRL: before), so a flat slot is never refilled with a group of
      the same step, which would train that group twice in one batch;
    - on a std tie at capacity the older group leaves (TRL keeps it and drops the new one): the newer group is
      nearer the current policy;
    - a flat group stays when the buffer holds fewer groups than there are flat slots (TRL then draws with
      replacement, so a stored group can fill several slots).
    """

    name: ClassVar[str] = "refill"
    needs: ClassVar[ReplayNeeds] = ReplayNeeds(buffer=True)

    def __init__(self, config: RefillReplayConfig, seed: int = 0) -> None:
        self.config = config
        self.buffer: list[StoredGroup] = []
        self.rng = np.random.default_rng(seed)

    def evict(self, step: int) -> None:
        """Drop groups more than `max_age` steps old at `step`."""
        if self.config.max_age is not None:
            self.buffer = [g for g in self.buffer if step - g.stored_at <= self.config.max_age]

    def join(self, fresh: list[Group], step: int) -> list[Group]:
        self.evict(step)
        flat = [i for i, g in enumerate(fresh) if is_flat(g.rollouts)]
        stored = [g for g in self.buffer if g.stored_at < step]
        count = min(len(flat), len(stored))
        groups = list(fresh)
        if count == 0:
            return groups
        p = np.array([g.std for g in stored])
        picks = self.rng.choice(len(stored), size=count, replace=False, p=p / p.sum())
        for slot, pick in zip(flat, picks.tolist()):
            chosen = stored[pick]
            chosen.drawn = True
            rollouts = [replace(r, origin="replay", advantage=None) for r in chosen.rollouts]
            groups[slot] = Group(rollouts[0].problem_id, rollouts)
        return groups

    def mix(self, groups: list[Group], step: int) -> list[Rollout]:
        for group in groups:
            rollouts = [r for r in group.rollouts if r.origin == "fresh"]
            if rollouts and not is_flat(rollouts):
                std = float(np.std([r.reward for r in rollouts], ddof=1))
                self.buffer.append(StoredGroup([replace(r, advantage=None) for r in rollouts], std, step))
        self.evict(step + 1)
        if len(self.buffer) > self.config.buffer_groups:
            order = sorted(range(len(self.buffer)), key=lambda i: (-self.buffer[i].std, -i))  # ties: newest first
            self.buffer = [self.buffer[i] for i in sorted(order[: self.config.buffer_groups])]
        return _flatten(groups)

    def stats(self) -> dict[str, float]:
        return {
            "buffer_size": len(self.buffer),
            "buffer_utilisation": float(np.mean([g.drawn for g in self.buffer])) if self.buffer else float("nan"),
        }

    def state_dict(self) -> dict[str, Any]:
        stored = [(g.rollouts, g.std, g.stored_at, g.drawn) for g in self.buffer]
        return {"rng": self.rng.bit_generator.state, "buffer": stored}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.buffer = [StoredGroup(*entry) for entry in state["buffer"]]
