"""The whole pipeline: its runs (`experiment`) and the loop (`run_pipeline`); its settings are
`rlep.tasks.settings.pipeline.PipelineConfig`.

    evaluate the start -> [explore: GRPO from the start] -> collect (Phase I pool) -> train each arm
    (Phase II) and evaluate its last checkpoint -> report

RLEP's order (arXiv 2507.07451, `pool_from: explore`, the default for an rlep arm without a pool): the pool
comes from a policy RL has already improved, and RLEP training restarts from the base model. So a plain
GRPO run from `train.model` explores first, the collection samples its final checkpoint, and the rlep arm
trains from `train.model` again. When that exploration run would be the baseline arm itself (same settings,
same seed, same steps), the baseline run is reused as the exploration and nothing is trained twice.

The pipeline is the one-seed preset of the study's planner (`experiment`, laid out by
`tasks.plan.plan_experiment`): the start evaluated first, the pool collected even when no arm replays it, its
own layout, the baseline arm optional. Its runs execute through the study's executor
(`tasks.execute.execute_run`): one place decides RLEP's order and what is evaluated, one decides each run's
actions. The loop has no Prefect in it: `flows/pipeline.py` passes Prefect subflows as the carrier of those
actions; without one (`rlep pipeline --no-prefect`, `rlep bench train`) each action is carried out by plain
functions in a fresh process of its own. A finished run with the same settings is not run again, so a killed
pipeline resumes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlep.data.run_layout import CollectRunLayout, PipelineLayout
from rlep.tasks.carry import Carrier, InFreshProcess
from rlep.tasks.execute import execute_plan, execute_run
from rlep.tasks.plan import Experiment, Run, SeedSettings, plan_experiment
from rlep.tasks.settings.pipeline import PipelineConfig


@dataclass
class PipelineResult:
    report: Path
    arms: dict[str, Path] = field(default_factory=dict)  # arm -> training run directory
    evaluations: dict[str, Path] = field(default_factory=dict)  # base / explore / arm -> evaluation directory
    collect_dir: Path | None = None
    pool_source: dict | None = None  # the exploration checkpoint the pool was sampled from


class _PlanLayout:
    """The pipeline's directories as the planner asks for them (one seed: the seed is not in the paths)."""

    def __init__(self, layout: PipelineLayout) -> None:
        self.layout = layout

    def run(self, arm: str, seed: int) -> Path:
        return self.layout.arm(arm)

    def explore(self, seed: int) -> Path:
        return self.layout.explore

    def collect(self, seed: int) -> CollectRunLayout:
        return self.layout.collect

    def living_pool(self, arm: str, seed: int) -> Path:
        return self.layout.living_pool(arm)

    def evaluation(self, name: str, seed: int, run_out: Path) -> Path:
        return self.layout.evaluation(name).root


def experiment(config: PipelineConfig) -> Experiment:
    """The pipeline as the planner's one-seed preset: `config.train.seed` with its arms (`arm_settings`), `train` as the
    exploration's start and `collect` as given, each evaluated with `evaluate`; the start evaluated first, the
    pool collected even when no arm replays it (Phase I, reported on its own), in this pipeline's layout."""
    layout = config.layout()
    return Experiment(
        seeds={config.train.seed: SeedSettings(config.arm_settings(), config.train, config.collect)},
        evaluation=lambda train, name, out: config.evaluate.model_copy(update={"out": out}),
        layout=_PlanLayout(layout),
        baseline="baseline",
        explore_steps=config.explore_steps,
        pool_from=config.pool_from,
        always_collect=True,
        start=config.evaluate.model_copy(update={"model": config.train.model, "out": layout.evaluation("base").root}),
    )


def plan(config: PipelineConfig) -> list[Run]:
    """The pipeline's runs: the start's evaluation, then one seed of the planner's runs."""
    return plan_experiment(experiment(config))


def run_pipeline(
    config: PipelineConfig,
    carry_out: Carrier | None = None,
    report: Callable[..., Any] | None = None,
    reuse: bool = True,
    progress: bool = True,
) -> PipelineResult:
    """Run the pipeline of `config`, then `report(out, arms, evaluations, collect_dir, pool_source)` (default
    `tasks.report.write_report`); see the module docstring for the order. Each run's actions are carried out by
    `carry_out` (the Prefect flow's subflows) or, by default, by plain functions each in a fresh process of its
    own (`tasks.carry.InFreshProcess`), so the step times the report compares carry nothing an earlier run left
    behind. `reuse`: keep finished runs with the same settings (False: run everything again)."""
    if report is None:
        from rlep.tasks.report import write_report as report
    runs = plan(config)
    carry_out = carry_out or InFreshProcess(progress)
    records = execute_plan(runs, lambda run, needs: execute_run(run, needs, carry_out, reuse=reuse))
    result = PipelineResult(report=config.layout().report)
    by_key = {run.key: run for run in runs}
    arm_runs = [run for run in runs if not run.continues]  # a living-pool arm: its first part stands for it
    for run in arm_runs:
        if run.kind == "evaluate":
            result.evaluations["base"] = Path(run.config.out)
        elif run.kind == "train":
            if run.arm is not None:
                result.arms[run.arm] = Path(run.config.out)
            result.evaluations[run.arm or "explore"] = Path(run.evaluate.out)
    for run in arm_runs:
        if run.kind == "collect":
            result.collect_dir = Path(records[run.key]["out"])
            if run.needs:
                explore = by_key[run.needs[0]]
                name = explore.arm or "explore"
                result.pool_source = {
                    "run": name,
                    "checkpoint": records[explore.key]["final_checkpoint"],
                    "eval": str(result.evaluations[name]),
                }
    result.report = Path(report(config.out, result.arms, result.evaluations, result.collect_dir, result.pool_source))
    return result
