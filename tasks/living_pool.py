"""A living pool: a training run that follows its own pool store, re-collected from its own checkpoints.

RLEP (arXiv 2507.07451) collects its pool once, from the explored policy, and replays it for the whole run. A
living pool goes on collecting: every `every` steps the run stops at a checkpoint, a collection samples that
checkpoint, verifies, and publishes a new version of the run's store (`data.pool.PoolStore`: the latest
version's answers plus the new ones), and training resumes; following the store (`replay.follow`), it replays
from the new version from the next step on. The planner lays such a run out as parts of the plan
(`tasks.plan`: train to the first refresh step, re-collect, train on, ...), each waiting for the one before it,
and the executor carries them out like any other run (`tasks.execute`): taking turns is deterministic and, on a
machine whose cores both would share, the same compute; `rlep serve`'s recollect deployment does the same beside
a running training. This module holds what those parts share: the store's start, each re-collection's
settings, its publication, and what it cost.

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
from rlep.tasks.settings.collect import CollectConfig
from rlep.tasks.settings.perturb import stream_seed


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

    def recollection(self, run_out: Path | str, step: int) -> CollectConfig:
        """The settings of the re-collection after `step` of the training run in `run_out`: it samples that
        step's checkpoint into a collection run of the store, with new samples each time, reproducibly."""
        return self.collect.model_copy(
            update={
                "model": str(TrainRunLayout(run_out).checkpoint(step)),
                "out": PoolStore(self.store).collection_run(f"after-step-{step}"),
                "run_id": f"{Path(run_out).name}-after-step-{step}",
                "seed": stream_seed(self.collect.seed, step),
            }
        )


def start_store(living: LivingPool, out: Path) -> None:
    """Before the run in `out` trains its first part: version 1 of its store is the collected pool (a store left
    there while nothing is trained yet is stale, and removed)."""
    if last_saved_step(out) == 0 and living.store.exists():
        shutil.rmtree(living.store)
    store = PoolStore(living.store)
    if not store.versions():
        store.publish(living.first_pool, {"run_dir": str(Path(living.first_pool).parent), "after_step": 0})


def collected_after(store: Path | str) -> set[int]:
    """The steps after which the latest version of `store` holds a re-collection (0: the first pool)."""
    store = PoolStore(store)
    versions = store.versions()
    return {c.get("after_step", 0) for c in store.lineage(versions[-1])["contributions"]} if versions else set()


def publish_recollection(living: LivingPool, collection: CollectConfig, step: int) -> Path:
    """Publish the finished re-collection after `step` (settings `collection`) as the store's next version."""
    return PoolStore(living.store).publish(
        CollectRunLayout(collection.out).pool,
        {"run_dir": str(collection.out), "model": collection.model, "after_step": step, "policy_version": step},
    )


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


def last_saved_step(out: Path | str) -> int:
    """The step of the newest complete checkpoint of the training run in `out` (0: none yet)."""
    from rlep.tasks.training.backends.checkpoint import list_checkpoints

    saved = {path: step for step, path in TrainRunLayout(out).step_checkpoints()}
    checkpoints = list_checkpoints(Path(out))
    return saved[checkpoints[-1]] if checkpoints else 0
