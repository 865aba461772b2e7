"""The settings of the whole pipeline (`rlep pipeline`, `flows.pipeline`): collect a pool, train with replay and
a baseline, evaluate every arm, report. The pipeline's runs and their order are tasks/pipeline.py's."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import BaseModel, Field, model_validator

from rlep.data.run_layout import PipelineLayout
from rlep.tasks.settings.collect import CollectConfig
from rlep.tasks.settings.evaluate import EvalConfig
from rlep.tasks.settings.paths import UserPath
from rlep.tasks.settings.replay import NoReplayConfig, RLEPReplayConfig
from rlep.tasks.settings.strict import SETTINGS
from rlep.tasks.settings.train import TrainConfig


class PipelineConfig(BaseModel):
    """Collect a pool, train with replay (and a baseline), evaluate, report."""

    model_config = SETTINGS

    # What the pipeline sets for each of its runs (their directories under `out`, each arm's model evaluated): no
    # flag of `rlep pipeline` offers them (`--train-out` would be ignored; `--out` places the runs).
    SET_PER_RUN: ClassVar[frozenset[str]] = frozenset({"collect.out", "train.out", "evaluate.out", "evaluate.model"})

    out: UserPath = Field(
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
        description="Where an rlep arm's pool comes from. `explore` (RLEP paper): a plain GRPO run from train.model, "
        "then "
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

    def arm_settings(self) -> dict[str, TrainConfig]:
        """Training settings per arm, as given (no pool filled in yet), with their output directories."""
        replay = self.train.replay
        arms = {replay.kind: self.train.model_copy(update={"out": self.layout().arm(replay.kind)})}
        if self.baseline and not isinstance(replay, NoReplayConfig):
            arms["baseline"] = self.train.model_copy(
                update={"replay": NoReplayConfig(), "out": self.layout().arm("baseline")}
            )
        return arms
