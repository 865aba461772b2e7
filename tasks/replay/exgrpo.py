"""ExGRPO: learning to reason from the run's own experience (Zhan et al. 2025, arXiv 2510.02245), as published.

The one design that chooses prompts: its `plan` puts replayed prompts into the step's generation in place of
drawn ones, each to get K - 1 fresh answers; its `join` completes their groups with one stored trajectory.
Everything it follows and every way it departs is in `ExGRPOReplay`'s docstring and docs/training.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np

from rlep.data.problem import Problem
from rlep.data.rollout import Group, PoolKey, Rollout
from rlep.tasks.replay.base import ReplayNeeds
from rlep.tasks.settings.replay import ExGRPOReplayConfig

# (prompt token ids, candidate answers' token ids) -> each answer's mean token entropy under the current policy.
EntropyOf = Callable[[list[int], list[list[int]]], list[float]]


def bucket_weights(successes: list[int], group_size: int, mean: float = 0.5, sigma: float = 1.0) -> np.ndarray:
    """Sampling probabilities of the buckets `successes` (each a success count k of K = `group_size`), normalised:
    exp(-(k - mean K)^2 / (2 sigma^2)), sigma in successes. The authors' code (`weighted_bucket_sampler.
    _normal_mapping`: mu = K/2, sigma = 1 success; its 1/sqrt(2 pi sigma^2) cancels); the paper's text writes
    N(k/K; 0.5, 1), sigma 1 in rates, which is nearly flat. Computed relative to the nearest bucket, so far
    buckets underflow to 0 and never all of them."""
    k = np.asarray(successes, dtype=float)
    d2 = (k - mean * group_size) ** 2
    w = np.exp(-(d2 - d2.min()) / (2 * sigma**2))
    return w / w.sum()


def sample_from_buckets(buckets: dict[int, list], n: int, probs: np.ndarray, rng: np.random.Generator) -> list:
    """Up to `n` distinct members of `buckets` (success count -> its members, each nonempty; `probs` in sorted key
    order), drawn as the authors' sampler (paper Alg. 2): bucket counts ~ Multinomial(n, probs); a count over its
    bucket's size is cut to it and the surplus drawn again one at a time among the buckets with room, in
    proportion to their probs; within a bucket, uniformly without replacement."""
    keys = sorted(buckets)
    sizes = np.array([len(buckets[k]) for k in keys])
    n = min(n, int(sizes.sum()))
    counts = np.minimum(rng.multinomial(n, probs), sizes)
    for _ in range(n - int(counts.sum())):
        room = counts < sizes
        p = np.where(room, probs, 0.0)
        p = p / p.sum() if p.sum() > 0 else room / room.sum()
        counts[rng.choice(len(keys), p=p)] += 1
    picks = []
    for k, count in zip(keys, counts.tolist()):
        picks += [buckets[k][i] for i in rng.choice(len(buckets[k]), size=count, replace=False).tolist()]
    return picks


@dataclass
class Stored:
    """One stored success: the rollout (token ids, behaviour log-probs, reward; advantage cleared), the step whose
    `mix` stored it, and whether it has ever been replayed."""

    rollout: Rollout
    stored_at: int
    drawn: bool = False


@dataclass
class Experience:
    """A prompt in the buffer: its problem (to generate for it again), its latest success count k of K (its
    bucket), and its stored successes."""

    problem: Problem
    successes: int
    trajectories: list[Stored]


class ExGRPOReplay:
    """ExGRPO (Zhan et al. 2025, arXiv 2510.02245; authors' code: ElliottYan/LUFFY, folder ExGRPO/).

    Paper and code: plain on-policy training until a batch's Pass@1 exceeds 0.35, then for good: every correct
    answer of a prompt with 1..K-1 of K correct is stored with its behaviour log-probs, the prompt bucketed by its
    latest success count k; a prompt with K of K correct is retired (deleted, never replayed; from step 1).
    Each step, up to min(floor(rho B), |buffer|) prompts are drawn from the buffer (bucket weights
    exp(-(k - K/2)^2 / 2), uniform without replacement within a bucket) in place of as many dataset prompts;
    each gets K - 1 fresh answers plus its stored trajectory of lowest mean token entropy under the current
    policy, o*, as one group; advantages over the K members; o*'s tokens train with the policy-shaped ratio
    f(w) = w / (w + 0.1), w = pi / pi_past per token against its stored log-probs, unclipped.
    Here: the same (`plan`: the prompts; `join`: o*, its row's `shaping` = beta; `mix`: retirement, collection,
    the delayed start), with rho, the start threshold, mu, sigma and beta as settings (paper's defaults).
    A replayed group's success count includes o* (the code's), so it is retired only when o* and all K - 1
    fresh answers are right; a group with no success leaves its prompt's bucket and trajectories as they were
    (the code's); a prompt may be drawn fresh and replayed in the same step (the code's).
    Departures:
    - the choice uses the paper's entropy, the mean over o's tokens of the next-token distribution's entropy
      under the current policy at the sampling temperature; the released code's mask selects padding positions
      of another candidate (a length-confounded total entropy) and is not reproduced;
    - fresh tokens keep the run's objective (PPO clip by default) after the switch; the code drops clipping for
      every token once ExGRPO is on. Kept so that arms differ in replay only (a wide clip comes close);
    - advantages (std division), aggregation and optimiser are the run's, shared by every design: the paper's
      are Dr. GRPO's (`loss.scale_advantages_by_std: false`, `aggregation: seq-mean-token-sum-norm`); its
      entropy bonus (0.001) and skip of updates with gradient norm > 500 are not implemented;
    - the stored log-probs are the engine's, those the answer was sampled with (`behaviour_logprobs`), not the
      trainer's recomputation at collection; answers without them are not stored; duplicates are found by token
      ids (the code: decoded text, re-tokenised when replayed);
    - o* keeps the reward it had when stored (the verifier does not change within a run; the code re-scores it);
    - a replayed prompt's K - 1 answers are generated as K - 1 (the paper's count; the code generates K and
      discards one), in an engine call of their own;
    - retired prompts stay in the dataset's draw (the code drops them from the next epoch on); they are never
      stored or replayed again;
    - `buffer_trajectories` optionally bounds the buffer (oldest stored leave first); unbounded by default;
    - sync mode and one training process only (`plan` reads the buffer as the step starts; refused with
      `mode: async` and with `backend.nproc` > 1).
    """

    name: ClassVar[str] = "exgrpo"
    needs: ClassVar[ReplayNeeds] = ReplayNeeds(buffer=True, policy=True)

    def __init__(self, config: ExGRPOReplayConfig, seed: int = 0, policy: EntropyOf | None = None) -> None:
        self.config = config
        self.policy = policy
        self.rng = np.random.default_rng(seed)
        self.buffer: dict[PoolKey, Experience] = {}
        self.retired: set[PoolKey] = set()
        self.active_from: int | None = 1 if config.start_accuracy == 0 else None  # the step replay switches on
        self.group_size: int | None = None  # K, as the step's plan is told
        self._planned: list[PoolKey] = []  # the prompts this step replays (the last of its groups)
        self._problems: dict[PoolKey, Problem] = {}  # this step's prompts, to store with their answers
        self._entropies: list[tuple[int, float]] = []  # per replayed prompt: candidates, entropy of the chosen one
        self._on = False  # whether the step that ran last had replay on

    def active(self, step: int) -> bool:
        return self.active_from is not None and step >= self.active_from

    def buckets(self) -> dict[int, list[PoolKey]]:
        """The buffer's prompts by their latest success count k (1..K-1), in the order they entered it."""
        out: dict[int, list[PoolKey]] = {}
        for key, entry in self.buffer.items():
            out.setdefault(entry.successes, []).append(key)
        return out

    def plan(self, prompts: list[Problem], step: int, group_size: int) -> list[tuple[Problem, int]]:
        """The step's prompts with their fresh answer counts: the first B - n drawn ones with K each, then n
        replayed ones with K - 1 each, n = min(floor(rho B), prompts in the buffer) once replay is on."""
        self.group_size, self._on = group_size, self.active(step)
        buckets = self.buckets()
        n = min(math.floor(self.config.replay_ratio * len(prompts)), len(self.buffer)) if self._on else 0
        self._planned = []
        if n:
            probs = bucket_weights(sorted(buckets), group_size, self.config.bucket_mean, self.config.bucket_sigma)
            self._planned = sample_from_buckets(buckets, n, probs, self.rng)
        replayed = [self.buffer[key].problem for key in self._planned]
        kept = prompts[: len(prompts) - len(replayed)]
        self._problems = {(p.data_source, p.id): p for p in [*kept, *replayed]}
        return [(p, group_size) for p in kept] + [(p, group_size - 1) for p in replayed]

    def join(self, fresh: list[Group], step: int) -> list[Group]:
        """The planned prompts' groups (the last ones) get their stored trajectory of lowest mean entropy."""
        self._entropies = []
        count = len(self._planned)
        if count == 0:
            return list(fresh)
        tail = fresh[len(fresh) - count :]
        keys = [(g.rollouts[0].data_source, g.rollouts[0].problem_id) for g in tail]
        if keys != self._planned:
            raise ValueError(f"exgrpo: the step's last groups are {keys}, not the prompts its plan replays")
        groups = list(fresh[: len(fresh) - count])
        for key, group in zip(keys, tail):
            anchor = group.rollouts[0]
            chosen = self.lowest_entropy(self.buffer[key].trajectories, anchor.prompt_token_ids)
            chosen.drawn = True
            replayed = replace(
                chosen.rollout,
                origin="replay",
                prompt=anchor.prompt,
                prompt_token_ids=anchor.prompt_token_ids,
                advantage=None,
                shaping=self.config.shaping_beta,
            )
            groups.append(Group(group.problem_id, group.rollouts + [replayed]))
        return groups

    def lowest_entropy(self, candidates: list[Stored], prompt_ids: list[int]) -> Stored:
        """The candidate whose answer has the lowest mean token entropy under the current policy (the first of
        equals); one candidate is taken without a forward pass."""
        if len(candidates) == 1:
            self._entropies.append((1, math.nan))
            return candidates[0]
        if self.policy is None:
            raise ValueError("exgrpo: choosing among stored trajectories needs `policy` (make_replay gives it)")
        entropies = self.policy(prompt_ids, [c.rollout.response_token_ids for c in candidates])
        best = int(np.argmin(entropies))
        self._entropies.append((len(candidates), float(entropies[best])))
        return candidates[best]

    def mix(self, groups: list[Group], step: int) -> list[Rollout]:
        """Retire fully solved prompts (from step 1); once replay is on, store the successes of partially solved
        ones and move them to the bucket of their latest count; switch replay on after a step whose Pass@1
        exceeds `start_accuracy`. Trains on every group member."""
        for group in groups:
            anchor = group.rollouts[0]
            key = (anchor.data_source, anchor.problem_id)
            k = sum(bool(r.correct) for r in group.rollouts)
            if k == len(group.rollouts):
                self.retired.add(key)
                self.buffer.pop(key, None)
            elif k > 0 and self.active(step) and key not in self.retired:
                self._store(key, k, group.rollouts, step)
        self._bound()
        fresh = [r for g in groups for r in g.rollouts if r.origin == "fresh"]
        if self.active_from is None and np.mean([bool(r.correct) for r in fresh]) > self.config.start_accuracy:
            self.active_from = step + 1
        return [r for g in groups for r in g.rollouts]

    def _store(self, key: PoolKey, successes: int, rollouts: list[Rollout], step: int) -> None:
        if key not in self._problems:
            raise ValueError(f"exgrpo: a group of {key} that this step's plan did not give")
        entry = self.buffer.get(key) or Experience(self._problems[key], successes, [])
        entry.successes = successes
        known = {tuple(s.rollout.response_token_ids) for s in entry.trajectories}
        for r in rollouts:
            ids = tuple(r.response_token_ids)
            usable = r.behaviour_logprobs is not None and len(r.behaviour_logprobs) == len(ids) > 0
            if r.origin == "fresh" and r.correct and usable and ids not in known:
                entry.trajectories.append(Stored(replace(r, advantage=None, shaping=None), stored_at=step))
                known.add(ids)
        if entry.trajectories:
            self.buffer[key] = entry

    def _bound(self) -> None:
        """Over `buffer_trajectories`, the oldest stored trajectories leave first (a prompt left with none leaves)."""
        cap = self.config.buffer_trajectories
        stored = [(s.stored_at, key, s) for key, e in self.buffer.items() for s in e.trajectories]
        if cap is None or len(stored) <= cap:
            return
        leaving = {id(s) for _, _, s in sorted(stored, key=lambda t: t[0])[: len(stored) - cap]}  # stable: buffer order
        for key in list(self.buffer):
            entry = self.buffer[key]
            entry.trajectories = [s for s in entry.trajectories if id(s) not in leaving]
            if not entry.trajectories:
                del self.buffer[key]

    def stats(self) -> dict[str, float]:
        stored = [s for e in self.buffer.values() for s in e.trajectories]
        chosen = [h for _, h in self._entropies if not math.isnan(h)]
        buckets = self.buckets()
        return {
            "buffer_size": len(stored),
            "buffer_prompts": len(self.buffer),
            "buffer_utilisation": float(np.mean([s.drawn for s in stored])) if stored else float("nan"),
            "retired_prompts": len(self.retired),
            "active": float(self._on),
            "candidates_mean": float(np.mean([c for c, _ in self._entropies])) if self._entropies else float("nan"),
            "chosen_entropy_mean": float(np.mean(chosen)) if chosen else float("nan"),
            **{f"bucket_{k}": len(buckets.get(k, [])) for k in range(1, self.group_size or 0)},
        }

    def state_dict(self) -> dict[str, Any]:
        buffer = [
            (key, e.problem, e.successes, [(s.rollout, s.stored_at, s.drawn) for s in e.trajectories])
            for key, e in self.buffer.items()
        ]
        return {
            "rng": self.rng.bit_generator.state,
            "buffer": buffer,
            "retired": sorted(self.retired),
            "active_from": self.active_from,
            "group_size": self.group_size,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.buffer = {
            key: Experience(problem, successes, [Stored(*s) for s in stored])
            for key, problem, successes, stored in state["buffer"]
        }
        self.retired = set(state["retired"])
        self.active_from = state["active_from"]
        self.group_size = state["group_size"]
