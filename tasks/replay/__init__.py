"""Replay strategies: which stored rollouts join a training step's fresh ones.

One interface (`ReplayStrategy`: `plan`, `join`, `mix`, `stats`, `state_dict`, `load_state_dict`); the loss does not
know which strategy runs. `make_replay(config, ...)` builds the strategy a `ReplayConfig` names; what a design
needs from the run (`needs(config)`: a pool, a buffer, the generation's advantages) is declared on its class.
The record replay works on is data.rollout's `Rollout` / `Group`.
"""

from rlep.tasks.replay.base import ReplayNeeds, ReplayStrategy
from rlep.tasks.replay.factory import check_inputs, make_replay, needs, pinned

__all__ = [
    "ReplayNeeds",
    "ReplayStrategy",
    "check_inputs",
    "make_replay",
    "needs",
    "pinned",
]
