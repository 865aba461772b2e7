"""`rlep bench fanout`: does running a study's runs at once on a local Ray beat running them one after another?

The same two identical training runs (a study of two plain-GRPO arms and one seed) are run twice, each time
from a fresh interpreter: one after another with the default threads (`runner: local`), and two at once on a
local Ray with `cpus_per_run` each (`runner: ray`). Default settings on both sides: an earlier comparison
held the sequential runs to one thread each, which handicapped them. Writes
bench/results/fanout-<time>.json with both wall times (Ray's start included) and the ratio; on 2 cores it is
expected below 1, since two one-core runs take as long as two two-core runs one after another.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from rlep.tasks.bench.report import write_bench_report
from rlep.tasks.runner import module_env


class FanoutBenchConfig(BaseModel):
    """Two identical training runs, one after another and two at once."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field("tiny", min_length=1, description="Starting policy of both runs.")
    steps: int = Field(10, ge=1, le=10_000, description="Training steps of each run.")
    prompts_per_step: int = Field(16, ge=1, le=10_000, description="Prompts per step (8 answers each).")
    cpus_per_run: int = Field(1, ge=1, le=1024, description="Ray: CPUs each of the two parallel runs gets.")
    out: Path = Field(Path("runs/bench-fanout"), description="Directory of the runs (local/ and ray/ studies).")
    results: Path = Field(Path("bench/results"), description="Directory for the JSON result.")

    def study(self, runner: str) -> dict[str, Any]:
        """The study settings for `runner` (`local` or `ray`)."""
        task = {"source": "tiny-math", "families": ["decimal"], "levels": [1], "limit": 200}
        return {
            "out": str(self.out / runner),
            "seeds": [0],
            "train": {
                "model": self.model,
                "problems": {**task, "split": "train"},
                "steps": self.steps,
                "eval_problems": {**task, "split": "test", "limit": 50},
                "prompts_per_step": self.prompts_per_step,
                "samples_per_prompt": 8,
                "eval_every": 0,
                "save_every": self.steps,
            },
            "evaluate": {"samples": 1, "problems": {**task, "split": "test", "limit": 50}},
            "arms": {"baseline": {"replay": {"kind": "none"}}, "twin": {"replay": {"kind": "none"}}},
            "runner": {"kind": runner, "cpus_per_run": self.cpus_per_run, "max_parallel": 2},
        }


def _timed_study(settings: dict[str, Any]) -> float:
    """Wall seconds of `rlep study` on `settings` in a fresh interpreter (its own threads and engines)."""
    out = Path(settings["out"])
    out.mkdir(parents=True, exist_ok=True)
    path = out / "study.yaml"
    path.write_text(yaml.safe_dump(settings))
    command = [sys.executable, "-m", "rlep.flows.cli", "study", "--config", str(path)]
    if settings["runner"]["kind"] == "local":
        command.append("--no-prefect")
    start = time.perf_counter()
    done = subprocess.run(command, env=module_env(), stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(
            f"bench fanout: the {settings['runner']['kind']} study failed (exit {done.returncode}); see {out}/rlep.log"
        )
    return seconds


def run_fanout_bench(config: FanoutBenchConfig) -> dict[str, Any]:
    """Both ways, sequential first; returns the summary and the result file's path."""
    import shutil

    from rlep.tasks.models import resolve_model

    config = config.model_copy(update={"model": resolve_model(config.model)})  # built once, outside the timing
    shutil.rmtree(config.out, ignore_errors=True)  # finished runs would be skipped, not timed
    load_before = os.getloadavg()[0]
    sequential = _timed_study(config.study("local"))
    parallel = _timed_study(config.study("ray"))
    summary = {
        "one_after_another_seconds": sequential,
        "two_at_once_on_ray_seconds": parallel,
        "speedup": sequential / parallel,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
    }
    path = write_bench_report("fanout", config.results, config=config.model_dump(mode="json"), summary=summary)
    return {"summary": summary, "path": str(path)}
