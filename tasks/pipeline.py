"""Settings of the whole pipeline (collect -> train with replay, and a baseline -> evaluate -> report), and
how they become each stage's settings. The Prefect flow that runs it is `flows.pipeline`."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tasks.collect import CollectConfig
from tasks.evaluate import EvalConfig
from tasks.replay.config import NoReplayConfig, RLEPReplayConfig
from tasks.training.config import TrainConfig


class PipelineConfig(BaseModel):
    """Collect a pool, train with replay (and a baseline), evaluate, report."""

    model_config = ConfigDict(extra="forbid")

    out: Path = Field(Path("runs/pipeline"), description="Directory of the whole run: collect/, <replay>/, baseline/, eval/, report.md.")
    collect: CollectConfig = Field(default_factory=CollectConfig, description="Phase I settings (its `out` is set to OUT/collect).")
    train: TrainConfig = Field(
        default_factory=lambda: TrainConfig(replay=RLEPReplayConfig(pool=None)),
        description="Phase II settings; an rlep replay without a pool uses the pool just collected.",
    )
    baseline: bool = Field(True, description="Also train a `replay: none` arm with the same seed and budget.")
    evaluate: EvalConfig = Field(
        default_factory=lambda: EvalConfig(samples=4), description="Final evaluation of every arm (its `model` is set per arm)."
    )
    collect_from_trained: bool = Field(
        False, description="Collect from train.model (a checkpoint, as the RLEP paper did) rather than collect.model."
    )

    @model_validator(mode="after")
    def _wire(self) -> PipelineConfig:
        updates = {"out": self.out / "collect"}
        if self.collect_from_trained:
            updates["model"] = self.train.model
        self.collect = self.collect.model_copy(update=updates)
        return self

    def arms(self) -> dict[str, TrainConfig]:
        """Training settings per arm, with the pool and output directories filled in."""
        replay = self.train.replay
        if isinstance(replay, RLEPReplayConfig) and replay.pool is None:
            replay = replay.model_copy(update={"pool": self.collect.out / "pool.parquet"})
        arms = {replay.kind: self.train.model_copy(update={"replay": replay, "out": self.out / replay.kind})}
        if self.baseline and replay.kind != "none":
            arms["baseline"] = self.train.model_copy(update={"replay": NoReplayConfig(), "out": self.out / "baseline"})
        return arms
