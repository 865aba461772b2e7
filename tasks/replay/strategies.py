"""The replay strategies behind one interface (`join` after the fresh answers are verified, `mix` after
advantages), and their registry (`DESIGNS`, by config `kind`); the designs that replay the run's own answers
into its groups (`reuse`, `refill`) live in self_replay.py, and ExGRPO (`exgrpo`, which also puts replayed prompts
into the step's generation through `plan`) in exgrpo.py.

Each class docstring states what its paper does, what we do, and every departure; the README's table of
designs says the same in one line each. Each class declares what it needs from the run (`needs`: a pool,
a buffer, the generation's advantages); code outside tasks/replay/ asks that, never which design runs.
Scoring, advantages and the loss are shared and do not know which strategy runs. A new design is a config
in tasks/settings/replay.py (and its place in the `ReplayConfig` union) and a class here, listed in `DESIGNS`.

Every design reports the same stats where they mean something (NaN where not): `buffer_size` (entries its
buffer or pool holds) and `buffer_utilisation` (the share of those ever replayed).
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np

from rlep.data.rollout import Group, PoolKey, Rollout
from rlep.tasks.replay.base import FreshPrompts, ReplayNeeds, ReplayStrategy
from rlep.tasks.replay.exgrpo import ExGRPOReplay
from rlep.tasks.replay.pool_source import PoolSource
from rlep.tasks.replay.self_replay import RefillReplay, ReuseReplay
from rlep.tasks.settings.replay import FIFOReplayConfig, NoReplayConfig, PrioritizedReplayConfig, RLEPReplayConfig

NO_BUFFER = {"buffer_size": float("nan"), "buffer_utilisation": float("nan")}


def _as_replayed(rollout: Rollout) -> Rollout:
    return replace(rollout, origin="replay")


def _flatten(groups: list[Group]) -> list[Rollout]:
    return [r for g in groups for r in g.rollouts]


class NoReplay(FreshPrompts):
    """Plain GRPO (the baseline): the step trains on its fresh groups, unchanged.

    Departures: the loss is the run's (`loss`), by default RLEP's recipe (clip 0.2 / 0.28, dual clip 10,
    token-mean, no KL) rather than GRPO's (clip 0.2, each answer's token mean, KL to a reference), which those
    settings can give. A group whose rewards are all equal gives no gradient and is counted in
    `zero_std_group_frac` (no dynamic sampling, DAPO's refill of flat groups, which GRPO does not have either)."""

    name: ClassVar[str] = "none"
    needs: ClassVar[ReplayNeeds] = ReplayNeeds()

    def __init__(self, config: NoReplayConfig | None = None, seed: int = 0) -> None:
        self.config = config or NoReplayConfig()

    def join(self, fresh: list[Group], step: int) -> list[Group]:
        return fresh

    def mix(self, groups: list[Group], step: int) -> list[Rollout]:
        return _flatten(groups)

    def stats(self) -> dict[str, float]:
        return dict(NO_BUFFER)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class RLEPReplay(FreshPrompts):
    """RLEP (Zhang et al. 2025, arXiv 2507.07451).

    Paper: phase 1 trains a policy with RL and collects its verified successes; phase 2 restarts from the
    base model, and every GRPO group holds G fresh answers plus M answers replayed from that pool for the same
    prompt (16 + 2), with advantages over all G+M; replayed answers are treated as on-policy (their log-probs
    recomputed by the current policy, no importance correction), PPO clip 0.2 / 0.28 with dual clip 10 (the
    released recipe's `clip_ratio_c`), token-mean, no KL.
    Here: the same per-group mix (`join`), M = `replay_per_group`, drawn uniformly without replacement from
    the prompt's pooled answers; the phases are run by the pipeline (explore -> collect -> train from base).
    Departures: replayed answers are re-scored by the current verifier when `rescore` (the paper's pool holds
    only verified successes, so this only guards against a changed verifier); a prompt with fewer than M
    pooled answers replays what it has (the trainer records the effective M); `loss.is_correction=truncate`
    can weight replayed tokens against their stored behaviour log-probs (off in the paper). The pool keeps every
    verified answer as the paper's does (`collect.dedupe` keeps one per distinct answer). `follow` (off by default)
    replays a living pool's newer versions, beyond the paper, whose pool is collected once. The run's settings,
    not this class, carry the rest of the recipe, and depart from it in size: G = 8, M = 2 and 32 prompts a step
    in 4 updates on the CPU (paper 16 + 2, 512 prompts in mini-batches of 64), 8 answers collected per problem
    by default and 16 in the demo (paper 64), learning rate 2e-4 for the tiny
    model (the recipe's 1e-6 is for 7B models), and the recipe's 10 warm-up updates, weight decay 0.1 and soft
    overlong penalty only in the configurations the README's designs table names.
    """

    name: ClassVar[str] = "rlep"
    needs: ClassVar[ReplayNeeds] = ReplayNeeds(pool=True)

    def __init__(
        self,
        config: RLEPReplayConfig,
        pool: dict[PoolKey, list[Rollout]],
        seed: int = 0,
        source: PoolSource | None = None,
    ) -> None:
        self.config = config
        self.pool = pool
        self.rng = random.Random(seed)
        self.coverage = float("nan")  # share of training problems with a pooled answer (set by make_replay)
        self.source = source  # follow: the store whose newer versions replace the pool between steps
        self.version = source.latest() if source else None
        self.drawn: set[tuple[PoolKey, int]] = set()  # (prompt, index) of pooled answers ever replayed

    def refresh(self, step: int) -> None:
        """follow: at the start of a step (never within one), at most every `refresh_every` steps, switch to the
        store's newest version if it is newer than the one replayed so far."""
        if self.source is None or (step - 1) % self.config.refresh_every:
            return
        latest = self.source.latest()
        if latest != self.version:
            self.use_version(latest)
            print(f"replay pool: step {step} replays from version v{latest:04d} of {self.source.root}")

    def use_version(self, version: int) -> None:
        self.pool, self.version = self.source.load(version), version
        self.drawn = set()
        self.coverage = self.source.coverage(self.pool)

    def join(self, fresh: list[Group], step: int) -> list[Group]:
        self.refresh(step)
        groups = []
        for group in fresh:
            anchor = group.rollouts[0]
            key = (anchor.data_source, anchor.problem_id)
            candidates = self.pool.get(key, [])
            # Indices drawn exactly as sample(candidates, k) would draw the answers (same stream).
            chosen = self.rng.sample(range(len(candidates)), min(self.config.replay_per_group, len(candidates)))
            self.drawn.update((key, i) for i in chosen)
            picks = [candidates[i] for i in chosen]
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

    def mix(self, groups: list[Group], step: int) -> list[Rollout]:
        return _flatten(groups)  # the pool is fixed (collected in phase 1)

    def stats(self) -> dict[str, float]:
        answers = sum(len(v) for v in self.pool.values())
        return {
            "buffer_size": answers,
            "buffer_utilisation": len(self.drawn) / answers if answers else float("nan"),
            "pool_problems": len(self.pool),
            "pool_answers": answers,
            "pool_coverage": self.coverage,
            "pool_version": float("nan") if self.version is None else self.version,
        }

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.getstate(), "pool_version": self.version, "drawn": set(self.drawn)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume with the pool version the checkpoint's step replayed from (a pruned one is an error)."""
        self.rng.setstate(state["rng"])
        if self.source is not None and state.get("pool_version") not in (None, self.version):
            self.use_version(state["pool_version"])
        self.drawn = set(state.get("drawn", ()))  # a checkpoint from before this count: none recorded


class FIFOReplay(FreshPrompts):
    """FIFO replay for asynchronous RL (arXiv 2604.08706).

    Paper: inference keeps pushing rollouts into a FIFO buffer of size N; the trainer samples its batch
    uniformly from the buffer without removing; generating fewer rollouts than the trainer consumes saves up
    to ~40% of the compute at equal accuracy; buffer size and replay ratio are the knobs, with an optional
    bias toward positive trajectories, and losses beyond GRPO (AsymRE: `loss.objective=asymre`).
    Here: each step's rollouts (with the advantages of their generation groups) enter the buffer, oldest out
    first, and the step trains on `batch_size` (default fresh / (1 - replay_ratio), rounded to whole
    mini-batches so FIFO makes whole updates like every design: 256 / 0.75 -> 320, not 341) rollouts drawn
    uniformly from the whole buffer, distinct within a step; rollouts of earlier steps are marked replayed.
    `positive_share` reserves that share of the draws for correct rollouts; `max_age` evicts old ones;
    `fresh_anchored` keeps all of this step's rollouts (the prioritized paper's design, not this paper's).
    Departures: the trainer is synchronous unless `mode: async` runs generation alongside it; advantages are
    those computed when a rollout was generated (not recomputed); while the buffer holds fewer rollouts than
    the batch, the step trains on the whole buffer.
    """

    name: ClassVar[str] = "fifo"
    needs: ClassVar[ReplayNeeds] = ReplayNeeds(buffer=True, generation_advantages=True)

    def __init__(self, config: FIFOReplayConfig, seed: int = 0) -> None:
        self.config = config
        self.buffer: deque[Rollout] = deque(maxlen=config.buffer_size)
        self.drawn: deque[bool] = deque(maxlen=config.buffer_size)  # beside buffer: ever replayed
        self.rng = random.Random(seed)

    def join(self, fresh: list[Group], step: int) -> list[Group]:
        return fresh

    def mix(self, groups: list[Group], step: int) -> list[Rollout]:
        fresh = [r for r in _flatten(groups) if r.origin == "fresh"]
        if self.config.max_age is not None:
            kept = [(r, d) for r, d in zip(self.buffer, self.drawn) if r.age(step) <= self.config.max_age]
            self.buffer = deque((r for r, _ in kept), maxlen=self.config.buffer_size)
            self.drawn = deque((d for _, d in kept), maxlen=self.config.buffer_size)
        self.buffer.extend(fresh)  # the oldest leave first when full
        self.drawn.extend([False] * len(fresh))
        first_fresh = len(self.buffer) - min(len(fresh), len(self.buffer))
        wanted = min(self.config.batch_rollouts(len(fresh)), len(self.buffer))
        if self.config.fresh_anchored:
            picks = self._draw(range(first_fresh), wanted - len(fresh))
            self._mark(picks, first_fresh)
            return fresh + [_as_replayed(self.buffer[i]) for i in picks]
        picks = self._draw(range(len(self.buffer)), wanted)
        self._mark(picks, first_fresh)
        return [self.buffer[i] if i >= first_fresh else _as_replayed(self.buffer[i]) for i in picks]

    def _mark(self, picks: list[int], first_fresh: int) -> None:
        """Record which drawn rollouts were replayed (from an earlier step), for `buffer_utilisation`."""
        for i in picks:
            if i < first_fresh:
                self.drawn[i] = True

    def _draw(self, candidates: range, count: int) -> list[int]:
        """`count` distinct indices from `candidates`, uniformly, `positive_share` of them from correct rollouts."""
        count = max(0, min(count, len(candidates)))
        positive = [i for i in candidates if self.buffer[i].correct]
        n_positive = min(round(self.config.positive_share * count), len(positive))
        picks = self.rng.sample(positive, n_positive)
        chosen = set(picks)
        rest = [i for i in candidates if i not in chosen]
        return sorted(picks + self.rng.sample(rest, count - n_positive))

    def stats(self) -> dict[str, float]:
        return {"buffer_size": len(self.buffer), "buffer_utilisation": _share(self.drawn)}

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.getstate(), "buffer": list(self.buffer), "drawn": list(self.drawn)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.setstate(state["rng"])
        self.buffer = deque(state["buffer"], maxlen=self.config.buffer_size)
        self.drawn = deque(state.get("drawn", [False] * len(self.buffer)), maxlen=self.config.buffer_size)


class PrioritizedReplay(FreshPrompts):
    """Advantage-prioritized replay (arXiv 2606.04560).

    Paper: a rollout-level buffer; rollouts older than tau_max policy updates are evicted; replayed rollouts
    are sampled with probability increasing in |advantage|; batches are fresh-anchored (every fresh rollout is
    trained on, replayed ones are added on top).
    Here: the same, with probability ~ (|A| + eps)^alpha, draws without replacement within a step, and
    `replay_fraction` x (fresh count) replayed rollouts per step. Choices the paper's description leaves open,
    made here: groups whose rewards are all equal are not stored (their advantages are 0, so they could never
    be drawn with any weight); priorities are the advantages computed at generation and are not updated after
    a rollout is replayed; no PER-style importance weights for the non-uniform draw (`loss.is_correction`
    corrects staleness only); eviction by age comes first, then, over capacity, the lowest priorities leave (on a
    tie, the newest);
    replay draws come from earlier steps only (this step's rollouts are in the batch already).

    `freshness_tau` makes it freshness-aware prioritized replay (FreshPER, arXiv 2604.16918):
    paper and released code multiply each priority by exp(-age / tau), so that of two equally informative rollouts
    the fresher is drawn more, and report that plain prioritized replay hurt LLM RL while the aged version helped.
    Here: P(i) ~ (|A_i| + eps)^alpha * exp(-age_i / tau), age in steps (policy versions) at the draw; over capacity the
    lowest decayed priorities leave. Departures: the released buffer's priority is |reward| + eps (an outcome
    reward; this design's is |advantage|, the prioritized paper's), and its `reward_fresh` puts the decay inside
    the exponent, ((|r| + eps) exp(-age / tau))^alpha, the same as this with tau / alpha; its max-priority
    insertion and priority updates after training are not used (priorities stay those of generation); its tau
    (500-1000) is in its own long runs' steps, so rlep's runs of tens of steps need a tau of a few steps.
    """

    name: ClassVar[str] = "prioritized"
    needs: ClassVar[ReplayNeeds] = ReplayNeeds(buffer=True, generation_advantages=True)

    def __init__(self, config: PrioritizedReplayConfig, seed: int = 0) -> None:
        self.config = config
        self.buffer: list[Rollout] = []
        self.drawn: list[bool] = []  # beside buffer: ever replayed
        self.rng = np.random.default_rng(seed)

    def priorities(self, step: int) -> np.ndarray:
        """Each stored rollout's priority at `step`: (|A| + eps)^alpha, times exp(-age / tau) when freshness-aware."""
        adv = np.array([abs(r.advantage or 0.0) for r in self.buffer], dtype=np.float64)
        priority = (adv + self.config.priority_eps) ** self.config.priority_alpha
        if self.config.freshness_tau is not None:
            age = np.array([r.age(step) for r in self.buffer], dtype=np.float64)
            priority = priority * np.exp(-age / self.config.freshness_tau)
        return priority

    def evict(self, step: int) -> None:
        """Drop rollouts older than tau_max at `step`."""
        self._keep([i for i, r in enumerate(self.buffer) if r.age(step) <= self.config.max_age])

    def _keep(self, indices: list[int]) -> None:
        self.buffer = [self.buffer[i] for i in indices]
        self.drawn = [self.drawn[i] for i in indices]

    def join(self, fresh: list[Group], step: int) -> list[Group]:
        return fresh

    def mix(self, groups: list[Group], step: int) -> list[Rollout]:
        fresh = [r for r in _flatten(groups) if r.origin == "fresh"]
        self.evict(step)
        replayed = self._draw(len(fresh), step)
        self._store(groups, step)
        return fresh + replayed

    def _draw(self, n_fresh: int, step: int) -> list[Rollout]:
        if step <= self.config.replay_warmup_steps or not self.buffer:
            return []
        wanted = min(round(self.config.replay_fraction * n_fresh), len(self.buffer))
        if wanted == 0:
            return []
        p = self.priorities(step)
        picks = sorted(self.rng.choice(len(self.buffer), size=wanted, replace=False, p=p / p.sum()).tolist())
        for i in picks:
            self.drawn[i] = True
        return [_as_replayed(self.buffer[i]) for i in picks]

    def _store(self, groups: list[Group], step: int) -> None:
        for group in groups:
            rollouts = [r for r in group.rollouts if r.origin == "fresh"]
            if len({r.reward for r in rollouts}) > 1:  # zero reward variance: no signal, not stored
                self.buffer.extend(rollouts)
                self.drawn.extend([False] * len(rollouts))
        self.evict(step + 1)  # what expires before the next draw goes first, not fresh low-|A| rollouts
        if len(self.buffer) > self.config.buffer_size:
            keep = np.argsort(-self.priorities(step + 1), kind="stable")[: self.config.buffer_size]
            self._keep(sorted(keep.tolist()))

    def stats(self) -> dict[str, float]:
        return {"buffer_size": len(self.buffer), "buffer_utilisation": _share(self.drawn)}

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.bit_generator.state, "buffer": list(self.buffer), "drawn": list(self.drawn)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.buffer = list(state["buffer"])
        self.drawn = list(state.get("drawn", [False] * len(self.buffer)))


def _share(flags) -> float:
    """The share of true flags (NaN for none): a buffer's entries ever replayed."""
    return sum(flags) / len(flags) if flags else float("nan")


# The designs by config `kind`: tasks.replay.factory builds a strategy from this table only.
DESIGNS: dict[str, type[ReplayStrategy]] = {
    design.name: design
    for design in (NoReplay, RLEPReplay, FIFOReplay, PrioritizedReplay, ReuseReplay, RefillReplay, ExGRPOReplay)
}
