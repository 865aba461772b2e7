"""Build the replay strategy a config names (RLEP also loads its pool here, pinned and with its coverage)."""

from __future__ import annotations

import sys
from pathlib import Path

from data.problem import Problem
from tasks.replay.base import ReplayStrategy
from tasks.replay.config import FIFOReplayConfig, PrioritizedReplayConfig, RLEPReplayConfig
from tasks.replay.pool import PoolKey, load_pool, resolve_pool_path
from tasks.replay.strategies import FIFOReplay, NoReplay, PrioritizedReplay, RLEPReplay

LOW_COVERAGE = 0.2  # below this share of training problems with a pooled answer, training warns


def pinned(config):
    """`config` with an rlep pool given as a store or a directory replaced by the file it resolves to now.

    A run records the pinned path in its saved settings, so `--resume` replays the same pool version even
    after a newer one is published to the store.
    """
    if isinstance(config, RLEPReplayConfig) and config.pool is not None:
        path = resolve_pool_path(Path(config.pool))
        if path != Path(config.pool):
            return config.model_copy(update={"pool": path})
    return config


def make_replay(config, seed: int = 0, problems: dict[PoolKey, Problem] | None = None) -> ReplayStrategy:
    """The strategy for `config`; `problems` (the training problems by key) lets RLEP check its pool against them."""
    if isinstance(config, RLEPReplayConfig):
        replay = RLEPReplay(config, load_pool(config.pool, problems), seed=seed)
        if problems:
            replay.coverage = len(replay.pool) / len(problems)
            print(f"replay pool {config.pool}: answers for {len(replay.pool)} of {len(problems)} training problems ({replay.coverage:.0%})")
            if replay.coverage < LOW_COVERAGE:
                print(f"warning: replay pool {config.pool} covers only {replay.coverage:.0%} of the training problems: most groups "
                      "will replay nothing (see replay_prompt_share in metrics.parquet)", file=sys.stderr)  # fmt: skip
        return replay
    if isinstance(config, FIFOReplayConfig):
        return FIFOReplay(config, seed=seed)
    if isinstance(config, PrioritizedReplayConfig):
        return PrioritizedReplay(config, seed=seed)
    return NoReplay()
