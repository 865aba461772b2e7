"""Where the pieces of a study (its runs) or of a collection (its shards) execute: in this process, one after
another, or on Ray. The runners are tasks/runner.py's and flows/ray_runner.py's."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from rlep.tasks.settings.strict import SETTINGS


class RunnerConfig(BaseModel):
    """Where the pieces of a study (its runs) or of a collection (its shards) execute."""

    model_config = SETTINGS

    kind: Literal["local", "ray"] = Field(
        "local",
        description="`local`: one after another (a study's runs each in a fresh process, see `isolate`; a "
        "collection's shards in this one); `ray`: in parallel through Prefect's Ray task runner.",
        json_schema_extra={"cli_flag": "runner"},
    )
    address: str | None = Field(
        None,
        description="Ray cluster address (`ray://host:10001` or `auto`); none: start a local Ray.",
        json_schema_extra={"cli_flag": "ray_address"},
    )
    cpus_per_run: float = Field(1.0, gt=0, description="CPUs of one run or shard (also its torch and OpenMP threads).")
    gpus_per_run: float = Field(
        0.0, ge=0, description="GPUs of one run or shard (vLLM's tensor parallelism goes in the engine settings)."
    )
    max_parallel: int | None = Field(None, ge=1, description="Local Ray only: CPUs Ray may use (default: all cores).")
    isolate: bool = Field(
        True,
        description="local, a study's runs: each action of a run (a collection, a training, an evaluation) in a fresh "
        "process of its own, so its timings carry nothing earlier runs left behind (its log lines still reach this "
        "run's log and the UI). On Ray every action has its own worker process anyway. False: all in this process.",
    )
