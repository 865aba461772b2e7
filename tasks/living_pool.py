"""A living pool: a training run that follows its own pool store, re-collected from its own checkpoints.

RLEP (arXiv 2507.07451) collects its pool once, from the explored policy, and replays it for the whole run. A
living pool goes on collecting: every `every` steps the run stops at a checkpoint, a collection samples that
checkpoint, verifies, and publishes a new version of the run's store (`data.pool.PoolStore`: the latest
version's answers plus the new ones), and training resumes; following the store (`replay.follow`), it replays
from the new version from the next step on. Here collection and training take turns in one process, which is
deterministic and, on a machine whose cores both would share, the same compute; `rlep serve`'s recollect
deployment does the same beside a running training.

Each re-collection is recorded in the store's lineage with the step it followed (`after_step`), which is how a
killed run resumes without collecting twice and how a study charges the arm for every re-collection from the step
it was paid on (`refresh_costs`).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from rlep.data.pool import PoolStore
from rlep.data.run_layout import CollectRunLayout, TrainRunLayout
from rlep.tasks.collect import collection_cost
from rlep.tasks.collect_config import CollectConfig
from rlep.tasks.training.config import TrainConfig


@dataclass(frozen=True)
class LivingPool:
    """How a run's pool lives: its store, the pool it starts from, how often and how it is re-collected."""

    store: Path  # the run's own pool store
    first_pool: Path  # version 1: the pool collected for RLEP from the explored policy
    every: int  # re-collect after every this many steps (the run's replay.refresh_every)
    collect: CollectConfig  # settings of each re-collection; its model and out are set per re-collection

    def refresh_steps(self, steps: int) -> list[int]:
        """The steps after which the pool is re-collected (none after the last step: nothing would replay it)."""
        return list(range(self.every, steps, self.every))


def train_living(config: TrainConfig, living: LivingPool, progress: bool = True) -> Path:
    """Train `config` (a run that follows `living.store`) to its last step, re-collecting after every
    `living.every` steps; resumes wherever a killed call stopped. Returns the final checkpoint."""
    from rlep.tasks.training.trainer import train

    store, out = PoolStore(living.store), Path(config.out)
    if _last_saved_step(out) == 0 and living.store.exists():  # nothing trained yet: a store left there is stale
        shutil.rmtree(living.store)
    if not store.versions():
        store.publish(living.first_pool, {"run_dir": str(Path(living.first_pool).parent), "after_step": 0})
    for end in [*living.refresh_steps(config.steps), config.steps]:
        done = _last_saved_step(out)
        if done < end:
            train(config.model_copy(update={"steps": end}), resume=done > 0, progress=progress)
        if end < config.steps and end not in _collected_after(store):
            _recollect(living, store, out, end, progress)
    return TrainRunLayout(out).checkpoint(config.steps)


def refresh_costs(store: Path | str) -> list[tuple[int, dict[str, float]]]:
    """(after_step, cost) of each re-collection published to `store`, in step order; cost as
    `tasks.collect.collection_cost` (tokens_generated, seconds). The first version (the pool RLEP's order
    collected) is not counted here: a study charges it as the arm's dependency."""
    store = PoolStore(store)
    versions = store.versions()
    if not versions:
        return []
    contributions = store.lineage(versions[-1])["contributions"]
    return sorted((c["after_step"], collection_cost(c["run_dir"])) for c in contributions if c.get("after_step", 0) > 0)


def _last_saved_step(out: Path) -> int:
    from rlep.tasks.training.checkpoint import list_checkpoints

    saved = {path: step for step, path in TrainRunLayout(out).step_checkpoints()}
    checkpoints = list_checkpoints(out)
    return saved[checkpoints[-1]] if checkpoints else 0


def _collected_after(store: PoolStore) -> set[int]:
    versions = store.versions()
    return {c.get("after_step", 0) for c in store.lineage(versions[-1])["contributions"]} if versions else set()


def _recollect(living: LivingPool, store: PoolStore, out: Path, step: int, progress: bool) -> None:
    """Sample the checkpoint of `step`, verify, publish the new version (a killed collection resumes its shards)."""
    from rlep.tasks.collect import run_collection
    from rlep.tasks.engines.cache import release_engines

    checkpoint = TrainRunLayout(out).checkpoint(step)
    collection = living.collect.model_copy(
        update={
            "model": str(checkpoint),
            "out": store.collection_run(f"after-step-{step}"),
            "run_id": f"{out.name}-after-step-{step}",
            "seed": living.collect.seed * 1_000_003 + step,  # new samples each time, reproducibly
        }
    )
    try:
        run_collection(collection, progress=progress)
    finally:
        release_engines()
    store.publish(
        CollectRunLayout(collection.out).pool,
        {"run_dir": str(collection.out), "model": str(checkpoint), "after_step": step, "policy_version": step},
    )
