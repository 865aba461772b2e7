"""A study's plan: the runs of its settings (`rlep.tasks.settings.study`) and what each waits for.

An arm is a name plus overrides of the base training settings, merged by the rule `--config` and flags follow
(`tasks.settings.layering.merge_settings`: `{replay: {kind: fifo}}` keeps every other base setting, a section whose
`kind` changes is replaced, keeping only what every kind of it has: a problem source's split and limit). Every
arm runs with every seed, and the seed is the training seed: the same seed in two arms means the same prompt
order and sampling seeds, so arms are compared paired by seed.

An rlep arm without a pool gets RLEP's order (`tasks.rlep_order`, the pipeline's too), once per seed and shared
by every arm that needs it: an exploration run (plain GRPO from the start; the baseline arm's own run when it is
the same run), then a collection from its last checkpoint. Each arm is charged in full for the runs it depends on
(`needs`),
even when they are shared or are the baseline's own run (`runs.gather`).

An rlep arm that follows its pool (`replay: {follow: true, refresh_every: K}`) and names none is a living-pool
arm (`tasks.living_pool`): it starts from the same collected pool, and every K steps its own checkpoint is
sampled again with the study's collection settings and a new version of its own store published (each
re-collection a run of the plan between two training parts of the arm); every re-collection is charged to it
from the step it was paid on.
"""

from __future__ import annotations

from pydantic import ValidationError

from rlep.data.run_layout import StudyLayout
from rlep.tasks.plan import Experiment, PlanError, Run, SeedSettings, plan_experiment
from rlep.tasks.settings.layering import booleans_for_numbers, refused_choices, validation_problems
from rlep.tasks.settings.study import StudyConfig
from rlep.tasks.settings.train import TrainConfig


class StudyError(PlanError):
    """A study configuration that cannot run; the message names the arm and the field."""


def with_models_resolved(config: StudyConfig, progress: bool = True) -> StudyConfig:
    """`config` with the starting model named by a path: `tiny` is built (or found) once, here, so every run
    of the study starts from the same weights even if the default model's settings change while it runs."""
    from rlep.tasks.models import resolve_model

    train = config.train.model_copy(update={"model": resolve_model(config.train.model, progress=progress)})
    return config.model_copy(update={"train": train})


def _validated(model, settings: dict, where: str):
    try:
        return model.model_validate(settings)
    except ValidationError as err:
        raise StudyError("; ".join(validation_problems(err, where, model))) from None


def _check_equal_updates(arms: dict[str, TrainConfig]) -> None:
    updates = {arm: train.updates_per_epoch() * train.ppo_epochs for arm, train in arms.items()}
    if len(set(updates.values())) > 1:
        raise StudyError(
            "optimizer updates per step differ: "
            + ", ".join(f"{arm} {n}" for arm, n in updates.items())
            + " (mini_batch_prompts x ppo_epochs; FIFO's batch counts as batch / samples_per_prompt prompts): give "
            "every arm the same, e.g. FIFO's replay.batch_size = the baseline's prompts_per_step x samples_per_prompt "
            "with fewer prompts_per_step, or set equal_updates: false for a study of the update count itself"
        )


def plan(config: StudyConfig) -> list[Run]:
    """Every run of the study in an order that respects `needs` (`tasks.plan.plan_experiment` over every seed, the
    pipeline's planner too); all settings validated before anything runs, every arm making as many optimizer
    updates per step as the others (unless `equal_updates` is off)."""
    layout = StudyLayout(config.out)
    base_settings = config.train.model_dump(mode="json")
    seeds: dict[int, SeedSettings] = {}
    for seed in config.seeds:
        arms = {}
        for arm, override in config.arms.items():
            this_run = {"seed": seed, "out": str(layout.run(arm, seed))}
            settings = config.arm_settings(arm) | this_run
            # a setting of another kind of section (tiny-math's `families` over a file source) fails validation
            arms[arm] = _validated(TrainConfig, settings, f"arms.{arm}")
            refused = booleans_for_numbers(arms[arm], override, ("arms", arm))
            refused += refused_choices(arms[arm], override, base_settings, ("arms", arm))
            if refused:  # e.g. an arm's split for a file without a split column: as `--config` refuses it
                raise StudyError("; ".join(refused))
        if config.equal_updates:
            _check_equal_updates(arms)
        base = config.train.model_copy(update={"seed": seed})
        seeds[seed] = SeedSettings(arms, base, config.collect.model_copy(update={"seed": seed}))
    experiment = Experiment(
        seeds=seeds,
        evaluation=lambda train, name, out: config.evaluate.for_run(train, out),
        layout=layout,
        baseline=config.baseline_arm,
        explore_steps=config.explore_steps,
    )
    try:
        return plan_experiment(experiment)
    except PlanError as err:
        raise StudyError(str(err)) from None
