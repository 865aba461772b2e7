"""Replay strategies: which stored rollouts join a training step's fresh ones.

One interface (`ReplayStrategy`: `select`, `add`, `state_dict`, `load_state_dict`); the loss does not
know which strategy runs. `make_replay(config, ...)` builds the strategy a `ReplayConfig` names.
"""

from tasks.replay.base import Group, ReplayStrategy, Rollout
from tasks.replay.config import (
    FIFOReplayConfig,
    NoReplayConfig,
    PrioritizedReplayConfig,
    ReplayConfig,
    RLEPReplayConfig,
)
from tasks.replay.factory import make_replay

__all__ = [
    "FIFOReplayConfig",
    "Group",
    "NoReplayConfig",
    "PrioritizedReplayConfig",
    "RLEPReplayConfig",
    "ReplayConfig",
    "ReplayStrategy",
    "Rollout",
    "make_replay",
]
