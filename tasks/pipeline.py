"""The whole pipeline, written once: settings (`PipelineConfig`) and the loop (`run_pipeline`).

    evaluate the start -> [explore: GRPO from the start] -> collect (Phase I pool) -> train each arm
    (Phase II) and evaluate its last checkpoint -> report

RLEP's order (arXiv 2507.07451, `pool_from: explore`, the default for an rlep arm without a pool): the pool
comes from a policy RL has already improved, and RLEP training restarts from the base model. So a plain
GRPO run from `train.model` explores first, the collection samples its final checkpoint, and the rlep arm
trains from `train.model` again. When that exploration run would be the baseline arm itself (same settings,
same seed, same steps), the baseline run is reused as the exploration and nothing is trained twice.

The loop has no Prefect in it: the stage functions are injected. `flows/pipeline.py` passes the Prefect
subflows, `local_stages()` plain functions (used by `rlep pipeline --no-prefect` and `rlep bench train`).
The study (`tasks/study/`) lays the same phases out as a grid of runs with dependencies, so that a runner can
run independent ones at once; each run calls the same collection, training and evaluation functions. Both take
RLEP's order (which arms replay a collected pool, which run explores) from one function, `tasks.rlep_order`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlep.data.run_layout import PipelineLayout
from rlep.tasks.collect import CollectConfig
from rlep.tasks.evaluate import EvalConfig
from rlep.tasks.replay.config import NoReplayConfig, RLEPReplayConfig
from rlep.tasks.rlep_order import RLEPOrder, exploration, rlep_order
from rlep.tasks.training.config import TrainConfig


class PipelineConfig(BaseModel):
    """Collect a pool, train with replay (and a baseline), evaluate, report."""

    model_config = ConfigDict(extra="forbid")

    out: Path = Field(
        Path("runs/pipeline"),
        description="Directory of the whole run: collect/, <replay>/, baseline/, eval/, report.md.",
    )
    collect: CollectConfig = Field(
        default_factory=CollectConfig, description="Phase I settings (its `out` is set to OUT/collect)."
    )
    train: TrainConfig = Field(
        default_factory=lambda: TrainConfig(replay=RLEPReplayConfig(pool=None)),
        description="Phase II settings; an rlep replay without a pool uses the pool this pipeline collects.",
    )
    baseline: bool = Field(True, description="Also train a `replay: none` arm with the same seed and budget.")
    evaluate: EvalConfig = Field(
        default_factory=lambda: EvalConfig(samples=4),
        description="Final evaluation of every arm (its `model` is set per arm).",
    )
    pool_from: Literal["explore", "collect-model"] = Field(
        "explore",
        description="Where an rlep arm's pool comes from. `explore` (RLEP paper): a plain GRPO run from train.model, then "
        "collection from its final checkpoint, then RLEP from train.model again. `collect-model`: collection from "
        "collect.model as given (the start, or any checkpoint you name).",
    )
    explore_steps: int | None = Field(
        None,
        ge=1,
        description="Steps of the exploration run (default: train.steps, so the baseline arm doubles as it).",
    )

    @model_validator(mode="after")
    def _wire(self) -> PipelineConfig:
        self.collect = self.collect.model_copy(update={"out": self.layout().collect.root})
        return self

    def layout(self) -> PipelineLayout:
        return PipelineLayout(self.out)

    def _arm_settings(self) -> dict[str, TrainConfig]:
        """Training settings per arm, as given (no pool filled in yet), with their output directories."""
        replay = self.train.replay
        arms = {replay.kind: self.train.model_copy(update={"out": self.layout().arm(replay.kind)})}
        if self.baseline and not isinstance(replay, NoReplayConfig):
            arms["baseline"] = self.train.model_copy(
                update={"replay": NoReplayConfig(), "out": self.layout().arm("baseline")}
            )
        return arms

    def order(self) -> RLEPOrder:
        """RLEP's order for these arms (tasks.rlep_order, shared with the study)."""
        return rlep_order(self._arm_settings(), "baseline", self.explore_steps, self.pool_from)

    def pooled_rlep(self) -> bool:
        """True when the arm's design needs a pool and none is given: it replays the one this pipeline collects."""
        return bool(self.order().pooled)

    def explores(self) -> bool:
        return self.order().explores

    def arms(self) -> dict[str, TrainConfig]:
        """Training settings per arm, with the pool and output directories filled in."""
        arms = self._arm_settings()
        for name in self.order().pooled:
            replay = arms[name].replay.model_copy(update={"pool": self.layout().collect.pool})
            arms[name] = arms[name].model_copy(update={"replay": replay})
        return arms

    def explore_run(self) -> tuple[str, TrainConfig]:
        """(name, settings) of the exploration run: the baseline arm when it is the same run, else OUT/explore."""
        order = self.order()
        if order.explore_arm is not None:
            return order.explore_arm, self.arms()[order.explore_arm]
        return "explore", exploration(self.train, order.explore_steps, self.layout().explore)


@dataclass
class PipelineStages:
    """The stage functions `run_pipeline` calls (Prefect subflows, or plain functions)."""

    collect: Callable[[CollectConfig], dict]  # -> at least {"run_dir": ...}
    train: Callable[[TrainConfig], Any]  # -> an object with `.out` and `.final_checkpoint`
    evaluate: Callable[[EvalConfig], Any]
    report: Callable[..., Any]  # (out, arms, evaluations, collect_dir, pool_source) -> report path


@dataclass
class PipelineResult:
    report: Path
    arms: dict[str, Path] = field(default_factory=dict)  # arm -> training run directory
    evaluations: dict[str, Path] = field(default_factory=dict)  # base / explore / arm -> evaluation directory
    collect_dir: Path | None = None
    pool_source: dict | None = None  # the exploration checkpoint the pool was sampled from


def run_pipeline(config: PipelineConfig, stages: PipelineStages) -> PipelineResult:
    """Run the pipeline of `config` with `stages`; see the module docstring for the order."""
    result = PipelineResult(report=config.layout().report)

    def evaluate(name: str, model: str) -> Path:
        out = config.layout().evaluation(name).root
        stages.evaluate(config.evaluate.model_copy(update={"model": model, "out": out}))
        result.evaluations[name] = out
        return out

    def train_arm(name: str, train_config: TrainConfig) -> Any:
        run = stages.train(train_config)
        result.arms[name] = Path(run.out)
        evaluate(name, str(run.final_checkpoint))
        return run

    evaluate("base", config.train.model)  # the start, so the final numbers have a "before"
    arms = config.arms()
    collect_config = config.collect
    if config.explores():
        name, explore_config = config.explore_run()
        if name == "baseline":
            explored = train_arm("baseline", arms.pop("baseline"))
        else:
            explored = stages.train(explore_config)
            evaluate("explore", str(explored.final_checkpoint))
        collect_config = collect_config.model_copy(update={"model": str(explored.final_checkpoint)})
        result.pool_source = {
            "run": name,
            "checkpoint": str(explored.final_checkpoint),
            "eval": str(result.evaluations[name]),
        }
    collected = stages.collect(collect_config)
    result.collect_dir = Path(collected["run_dir"])
    for name, train_config in arms.items():
        train_arm(name, train_config)
    result.report = Path(
        stages.report(config.out, result.arms, result.evaluations, result.collect_dir, result.pool_source)
    )
    return result


def local_stages(progress: bool = True) -> PipelineStages:
    """Plain (Prefect-free) stage functions: each stage runs in this process."""
    from rlep.tasks.collect import run_collection
    from rlep.tasks.engines.cache import release_engines
    from rlep.tasks.evaluate import evaluate
    from rlep.tasks.report import write_report
    from rlep.tasks.training.trainer import train

    def collect(collect_config: CollectConfig) -> dict:
        try:
            return run_collection(collect_config, progress=progress)
        finally:
            release_engines()

    return PipelineStages(
        collect=collect,
        train=lambda train_config: train(train_config, progress=progress),
        evaluate=lambda eval_config: evaluate(eval_config, progress=progress),
        report=write_report,
    )
