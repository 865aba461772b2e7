"""Build the replay strategy a config names (RLEP also loads its pool here)."""

from __future__ import annotations

from tasks.replay.base import ReplayStrategy
from tasks.replay.config import FIFOReplayConfig, PrioritizedReplayConfig, RLEPReplayConfig
from tasks.replay.pool import load_pool
from tasks.replay.strategies import FIFOReplay, NoReplay, PrioritizedReplay, RLEPReplay


def make_replay(config, seed: int = 0, problem_ids: set[str] | None = None) -> ReplayStrategy:
    """The strategy for `config`; `problem_ids` (the training problems) lets RLEP check its pool covers some."""
    if isinstance(config, RLEPReplayConfig):
        return RLEPReplay(config, load_pool(config.pool, problem_ids), seed=seed)
    if isinstance(config, FIFOReplayConfig):
        return FIFOReplay(config, seed=seed)
    if isinstance(config, PrioritizedReplayConfig):
        return PrioritizedReplay(config, seed=seed)
    return NoReplay()
