"""Build the replay strategy a config names (strategies.DESIGNS, by `kind`), with what its design declares it
needs. A pool is read here (data.pool.read_pool), checked before the run, matched to the training problems by
(data_source, problem_id), pinned to one version, and its coverage reported."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from rlep.data.pool import resolve_pool_path
from rlep.data.problem import Problem
from rlep.data.rollout import PoolKey
from rlep.tasks.replay.base import ReplayNeeds, ReplayStrategy
from rlep.tasks.replay.pool_source import PoolSource, load_pool
from rlep.tasks.replay.strategies import DESIGNS

LOW_COVERAGE = 0.2  # below this share of training problems with a pooled answer, training warns


def needs(config) -> ReplayNeeds:
    """What the design `config` names needs from the run (its class's declaration)."""
    return DESIGNS[config.kind].needs


def reads_pool(config) -> bool:
    """The run reads a pool: its design replays one (RLEP), or it was given one to start from (reuse's seed)."""
    return needs(config).pool or getattr(config, "pool", None) is not None


def check_inputs(config) -> None:
    """Fail now, before any model is loaded, when the design's inputs are missing (a pool that is not there)."""
    if reads_pool(config):
        resolve_pool_path(config.pool)


def pinned(config):
    """`config` with a pool given as a store or a directory replaced by the file it resolves to now.

    A run records the pinned path in its saved settings, so `--resume` replays the same pool version even
    after a newer one is published to the store. A run that follows the store (`follow`) keeps the store: its
    checkpoints record the version each step replayed from instead.
    """
    if reads_pool(config) and config.pool is not None and not getattr(config, "follow", False):
        path = resolve_pool_path(Path(config.pool))
        if path != Path(config.pool):
            return config.model_copy(update={"pool": path})
    return config


def make_replay(
    config,
    seed: int = 0,
    problems: dict[PoolKey, Problem] | None = None,
    policy: Callable[[list[int], list[list[int]]], list[float]] | None = None,
) -> ReplayStrategy:
    """The strategy for `config`; `problems` (the training problems by key) lets a pool be checked against them;
    `policy` scores stored answers under the current policy, for a design that `needs.policy` (ExGRPO)."""
    design = DESIGNS[config.kind]
    if design.needs.policy:
        return design(config, seed=seed, policy=policy)
    if not reads_pool(config):
        return design(config, seed=seed)
    if getattr(config, "follow", False):
        source = PoolSource(config.pool, problems)
        replay = design(config, source.load(source.latest()), seed=seed, source=source)
    else:
        replay = design(config, load_pool(config.pool, problems), seed=seed)
    if problems:
        replay.coverage = len(replay.pool) / len(problems)
        print(
            f"replay pool {config.pool}: answers for {len(replay.pool)} of {len(problems)} training problems "
            f"({replay.coverage:.0%})"
        )
        if replay.coverage < LOW_COVERAGE:
            print(
                f"warning: replay pool {config.pool} covers only {replay.coverage:.0%} of the training problems: most "
                f"groups "
                "will replay nothing (see replay_prompt_share in metrics.parquet)",
                file=sys.stderr,
            )
    return replay
