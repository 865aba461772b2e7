"""One planner for the pipeline and the study: an experiment's settings -> its runs, with what each waits for.

    [evaluate the start] -> per seed: [explore: plain GRPO from the start] -> collect (the pool)
                            -> train each arm -> evaluate its last checkpoint

`plan_experiment` lays out every run of an `Experiment` and decides, once for both callers: which arms replay
a collected pool and which run explores (RLEP's order, `tasks.rlep_order`: the baseline arm's own run when it
is the same run, else a separate exploration run), where the pool is sampled from, which arms follow a living
pool of their own (`tasks.living_pool`), and what is evaluated (every arm's last checkpoint, a separate
exploration's, and the start when asked). `rlep study` is an experiment of every seed (`tasks.study`); `rlep
pipeline` its one-seed preset (`tasks.pipeline`): the start evaluated first, the pool collected even when no
arm replays it, its own layout, the baseline arm optional. Where each run writes is the caller's layout
(`PlanLayout`); how a run executes, `tasks.execute`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, Protocol

from rlep.data.run_layout import CollectRunLayout
from rlep.tasks.living_pool import LivingPool
from rlep.tasks.rlep_order import exploration, rlep_order
from rlep.tasks.settings.collect import CollectConfig
from rlep.tasks.settings.evaluate import EvalConfig
from rlep.tasks.settings.study import COLLECT_RUN, EVALUATE_RUN, EXPLORE_RUN
from rlep.tasks.settings.train import TrainConfig


class PlanError(ValueError):
    """Settings the planner cannot lay out; the message names the arm and the field."""


@dataclass
class Run:
    """One unit of work: a training run (an arm at a seed, or an exploration) with the evaluation of its last
    checkpoint, a collection, a living-pool arm's re-collection, or an evaluation of a given model."""

    key: str  # e.g. "rlep/seed-0", "explore/seed-0", "collect/seed-0", "evaluate/base"
    kind: Literal["train", "collect", "recollect", "evaluate"]
    seed: int
    arm: str | None  # the arm a training run or re-collection belongs to (None: exploration, collection, evaluation)
    config: TrainConfig | CollectConfig | EvalConfig
    evaluate: EvalConfig | None = None  # train: evaluation of the final checkpoint (its model is set then)
    needs: list[str] = field(default_factory=list)  # keys of runs whose results this one uses
    living: LivingPool | None = None  # a part of a living-pool arm's run: its store and re-collections
    # A part of a living-pool arm's run: a training part trains steps start+1..end, resuming the checkpoint of
    # start (its `config` is the whole run's; the part whose end is `config.steps` evaluates); a re-collection
    # samples the checkpoint of end (start == end) and publishes a new version of the arm's store.
    span: tuple[int, int] | None = None

    @property
    def continues(self) -> bool:
        """A later part of a living-pool arm's run (a re-collection, or training resumed after one). The arm's
        first part, keyed as the arm's run, stands for it: it needs what the arm is charged for."""
        return self.span is not None and self.span[0] > 0


def check_plan_inputs(runs: list[Run]) -> None:
    """What a user can get wrong in a plan, checked in seconds before its first run starts: each distinct problem
    source once (file, split, rows), each training run's base model, and the model and replay inputs of each other
    run that no earlier run of the plan makes (a collection from the exploration's checkpoint, or an arm replaying
    the plan's own pool, needs those runs first). Raises the source's, model's or pool's own error. Without it, a
    bad training source failed only after the base evaluation had run and written."""
    from rlep.data.sources import check_source
    from rlep.tasks.models import check_model
    from rlep.tasks.replay import check_inputs

    sources, models = set(), set()  # each checked once (a hub model's check may probe the network)
    sections = {"collect": "collect", "recollect": "collect", "evaluate": "evaluate", "train": "train"}
    for run in runs:
        for section, config in ((sections[run.kind], run.config), ("evaluate", run.evaluate)):
            for name in ("problems", "eval_problems"):
                source = getattr(config, name, None)
                if source is not None and (key := source.model_dump_json()) not in sources:
                    sources.add(key)
                    check_source(source, f"{section}.{name} (run {run.key})")
        # a training run starts from its base model; a collection or evaluation that needs a run, from its checkpoint
        if (run.kind == "train" or not run.needs) and run.config.model not in models:
            models.add(run.config.model)
            check_model(run.config.model)
        if run.kind == "train" and not run.needs:
            check_inputs(run.config.replay)


class PlanLayout(Protocol):
    """Where a plan's runs write (the pipeline's and the study's layouts in `data.run_layout`)."""

    def run(self, arm: str, seed: int) -> Path: ...
    def explore(self, seed: int) -> Path: ...
    def collect(self, seed: int) -> CollectRunLayout: ...
    def living_pool(self, arm: str, seed: int) -> Path: ...
    def evaluation(self, name: str, seed: int, run_out: Path) -> Path: ...


Evaluation = Callable[[TrainConfig, str, Path], EvalConfig]  # (trained run's settings, name, out) -> settings


@dataclass(frozen=True)
class SeedSettings:
    """One seed's settings as the planner takes them."""

    arms: dict[str, TrainConfig]  # each arm's training settings, seed and out set, no collected pool filled in yet
    base: TrainConfig  # what a separate exploration run starts from (as plain GRPO, for the exploration's steps)
    collect: CollectConfig  # the collection's (its model is replaced by the exploration's last checkpoint)


@dataclass(frozen=True)
class Experiment:
    """What a plan is derived from: a study's settings (every seed) or the pipeline's (its one-seed preset)."""

    seeds: dict[int, SeedSettings]
    evaluation: Evaluation  # the final evaluation of a trained run
    layout: PlanLayout
    baseline: str | None  # the arm that may double as the exploration run (absent: none does)
    explore_steps: int | None = None  # steps of the exploration run (None: the baseline's)
    pool_from: Literal["explore", "collect-model"] = "explore"
    always_collect: bool = False  # collect even when no arm replays the pool (the pipeline's Phase I, reported)
    start: EvalConfig | None = None  # evaluate the starting model first (its `model` and `out` set): `evaluate/base`


def plan_experiment(experiment: Experiment) -> list[Run]:
    """Every run of `experiment` in an order that respects `needs`: the start's evaluation when asked, then each
    seed's runs."""
    runs = []
    if experiment.start is not None:
        runs.append(Run(f"{EVALUATE_RUN}/base", "evaluate", next(iter(experiment.seeds)), None, experiment.start))
    for seed, settings in experiment.seeds.items():
        runs += _plan_seed(experiment, seed, settings)
    return runs


def _plan_seed(experiment: Experiment, seed: int, settings: SeedSettings) -> list[Run]:
    """The runs of one seed, in an order that respects `needs`."""
    arms, collect, layout, evaluation = settings.arms, settings.collect, experiment.layout, experiment.evaluation
    order = rlep_order(arms, experiment.baseline, experiment.explore_steps, experiment.pool_from)
    runs: list[Run] = []
    collect_key = f"{COLLECT_RUN}/seed-{seed}"
    explore_key = None
    if order.pooled and order.explores:
        if order.explore_arm is not None:
            explore_key = f"{order.explore_arm}/seed-{seed}"
            runs.append(_train(explore_key, seed, order.explore_arm, arms[order.explore_arm], evaluation, layout))
        else:
            explore = exploration(settings.base, order.explore_steps, layout.explore(seed))
            explore_key = f"{EXPLORE_RUN}/seed-{seed}"
            runs.append(_train(explore_key, seed, None, explore, evaluation, layout, name=EXPLORE_RUN))
    collects = bool(order.pooled) or experiment.always_collect
    if collects:
        out = layout.collect(seed).root
        runs.append(
            Run(collect_key, "collect", seed, None, collect.model_copy(update={"out": out}), needs=_keys(explore_key))
        )
    for arm, train_config in arms.items():
        key = f"{arm}/seed-{seed}"
        if key == explore_key:
            continue
        living = None
        if arm in order.pooled:
            pool = layout.collect(seed).pool
            if getattr(train_config.replay, "follow", False):
                living = _living_pool(train_config, arm, collect, layout.living_pool(arm, seed), pool)
                pool = living.store
            train_config = train_config.model_copy(
                update={"replay": train_config.replay.model_copy(update={"pool": pool})}
            )
        needs = _keys(collect_key) if arm in order.pooled else []
        run = _train(key, seed, arm, train_config, evaluation, layout, needs=needs, living=living)
        runs += _living_parts(run) if living is not None else [run]
    return runs


def _keys(key: str | None) -> list[str]:
    return [key] if key is not None else []


def _train(
    key: str,
    seed: int,
    arm: str | None,
    config: TrainConfig,
    evaluation: Evaluation,
    layout: PlanLayout,
    name: str | None = None,
    needs: list[str] | None = None,
    living: LivingPool | None = None,
) -> Run:
    name = name or arm
    final = evaluation(config, name, layout.evaluation(name, seed, Path(config.out)))
    return Run(key, "train", seed, arm, config, final, needs or [], living)


def _living_pool(config: TrainConfig, arm: str, collect: CollectConfig, store: Path, first_pool: Path) -> LivingPool:
    """A living-pool arm's store, re-collected with the plan's collection settings."""
    every = config.replay.refresh_every
    if every >= config.steps:
        raise PlanError(
            f"arms.{arm}: replay.refresh_every ({every}) must be below steps ({config.steps}), "
            "or the pool is never re-collected"
        )
    return LivingPool(store, first_pool, every, collect)


def _living_parts(run: Run) -> list[Run]:
    """A living-pool arm's run as parts, each needing the one before it: train to the first refresh step from
    the collected pool (keyed as the arm's run), then in turn re-collect from the last checkpoint and train on to
    the next refresh step, the last part to `config.steps`, evaluated."""
    ends = [*run.living.refresh_steps(run.config.steps), run.config.steps]
    parts = [replace(run, span=(0, ends[0]))]
    for start, end in zip(ends, ends[1:]):
        trained = parts[-1].key
        recollect = Run(
            f"{run.key}/collect-after-{start}",
            "recollect",
            run.seed,
            run.arm,
            run.living.recollection(run.config.out, start),
            needs=[trained],
            living=run.living,
            span=(start, start),
        )
        resumed = replace(
            run, key=f"{run.key}/steps-{start + 1}-{end}", needs=[trained, recollect.key], span=(start, end)
        )
        parts += [recollect, resumed]
    return parts
