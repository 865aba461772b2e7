"""RLEP's phase order, decided in one place for the pipeline (`tasks/pipeline.py`) and the study (`tasks/study/`).

RLEP (arXiv 2507.07451) collects its pool from a policy that RL has already improved, then restarts from the
base model: explore (plain GRPO from the start) -> collect from the exploration's final checkpoint -> train
each arm that replays that pool from the start again. Which arms replay a collected pool, and which run
explores, is decided here: an arm whose design needs a pool and was given none replays the one collected for
it; the baseline arm's own run is the exploration when it is plain GRPO of the exploration's length (nothing is
trained twice), otherwise a separate exploration run is planned.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlep.tasks.replay import needs
from rlep.tasks.settings.replay import NoReplayConfig
from rlep.tasks.settings.train import TrainConfig


@dataclass(frozen=True)
class RLEPOrder:
    """What RLEP's order asks of a set of arms (one seed)."""

    pooled: tuple[str, ...]  # arms that replay the pool collected for them
    explore_arm: str | None  # the arm whose own run is the exploration, or None
    explore_steps: int | None  # steps of a separate exploration run, when no arm's run doubles as it

    @property
    def explores(self) -> bool:
        """An exploration precedes the collection (always, when an arm replays a collected pool, unless the
        pool comes from a named model)."""
        return self.explore_arm is not None or self.explore_steps is not None


def rlep_order(
    arms: dict[str, TrainConfig], baseline: str | None, explore_steps: int | None = None, pool_from: str = "explore"
) -> RLEPOrder:
    """The order for `arms` (their settings before any pool is filled in), `baseline` naming the reference arm.

    `pool_from="collect-model"` collects from the collection's own model instead (no exploration)."""
    pooled = tuple(name for name, arm in arms.items() if needs(arm.replay).pool and arm.replay.pool is None)
    if not pooled or pool_from != "explore":
        return RLEPOrder(pooled, None, None)
    base = arms.get(baseline) if baseline is not None else None
    steps = explore_steps or (base or arms[pooled[0]]).steps
    if base is not None and isinstance(base.replay, NoReplayConfig) and steps == base.steps:
        return RLEPOrder(pooled, baseline, None)
    return RLEPOrder(pooled, None, steps)


def exploration(train: TrainConfig, steps: int, out: Path) -> TrainConfig:
    """The settings of a separate exploration run: `train`'s, as plain GRPO, for `steps`, written to `out`."""
    return train.model_copy(update={"replay": NoReplayConfig(), "steps": steps, "out": out})
