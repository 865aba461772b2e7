"""Build the replay strategy a config names (RLEP also loads its pool here)."""

from __future__ import annotations

from data.problem import Problem
from tasks.replay.base import ReplayStrategy
from tasks.replay.config import FIFOReplayConfig, PrioritizedReplayConfig, RLEPReplayConfig
from tasks.replay.pool import PoolKey, load_pool
from tasks.replay.strategies import FIFOReplay, NoReplay, PrioritizedReplay, RLEPReplay


def make_replay(config, seed: int = 0, problems: dict[PoolKey, Problem] | None = None) -> ReplayStrategy:
    """The strategy for `config`; `problems` (the training problems by key) lets RLEP check its pool against them."""
    if isinstance(config, RLEPReplayConfig):
        return RLEPReplay(config, load_pool(config.pool, problems), seed=seed)
    if isinstance(config, FIFOReplayConfig):
        return FIFOReplay(config, seed=seed)
    if isinstance(config, PrioritizedReplayConfig):
        return PrioritizedReplay(config, seed=seed)
    return NoReplay()
