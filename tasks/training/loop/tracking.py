"""A training run's numbers where users look: a tracker (TensorBoard or MLflow) and one log line per step.

The trainer hands each step's metrics row, and each evaluation's rows, to an `on_step(row, eval_rows)`
callback. `StepReport` is that callback:

- every numeric column of the row goes to the run's tracker as a scalar at the row's step
  (`train/<column>`), and every number of an evaluation per data source (`eval/<source>/avg_at_k`, ...):
  TensorBoard event files in OUT/tensorboard (`tensorboard --logdir OUT`), or an MLflow store in the file
  OUT/mlflow.db (`mlflow ui --backend-store-uri sqlite:///OUT/mlflow.db`), as `TrainConfig.tracker` says;
- one line per step (reward, accuracy, replay share, replayed rows' age, the replay buffer's size and use, flat
  groups before -> after replay, phase times) and per evaluation goes to the
  `rlep.train` logger, which flows/runlog.py forwards to the Prefect run's Logs tab.

NaN values (`replay_accuracy` of a step that replayed nothing) are left out: a tracker has no value at that
step, as TRL and verl log nothing for a metric that did not occur. Writers open at the first call, so a run
that is skipped as finished creates nothing. A resumed run continues the same TensorBoard directory and
purges its events from the first recomputed step on, as metrics.parquet is cut back to the checkpoint; an
MLflow run is continued by name.
"""

from __future__ import annotations

import json
import logging
import math
import numbers
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from rlep.data.run_layout import TrainRunLayout
from rlep.tasks.settings.tracker import Tracker, check_tracker
from rlep.tasks.training.loop.step_metrics import PHASES

MLFLOW_EXPERIMENT = "rlep"

log = logging.getLogger("rlep.train")

OnStep = Callable[[dict, "list[dict] | None"], None]
# Phase timings shown in a step's log line, in the step's order (tasks/training/loop/step_metrics.py PHASES).


# ---------------------------------------------------------------- what is written


def numeric_columns(row: dict) -> dict[str, float]:
    """Every numeric column of a metrics row except `step`, as floats; NaN values left out."""
    values = {}
    for key, value in row.items():
        if key == "step" or not isinstance(value, numbers.Real):
            continue
        value = float(value)
        if not math.isnan(value):
            values[key] = value
    return values


def eval_scalars(rows: list[dict]) -> dict[str, float]:
    """An evaluation's numbers per data source: `eval/<source>/<column>` (the `all` row included)."""
    return {f"eval/{row['data_source']}/{key}": value for row in rows for key, value in numeric_columns(row).items()}


def step_line(row: dict, steps: int) -> str:
    """`step 3/40  reward 0.312  accuracy 0.281  replay 0.250  pool v0002  1.21 s/step (generate 0.52, ...)`."""
    parts = [f"step {row['step']}/{steps}"]
    for key, label in (("reward_mean", "reward"), ("accuracy", "accuracy"), ("replay_share", "replay")):
        if isinstance(row.get(key), numbers.Real):
            parts.append(f"{label} {row[key]:.3f}")
    parts.extend(_replay_parts(row))
    version = row.get("replay_pool_version")
    if isinstance(version, numbers.Real) and version == version:  # a run following a pool store (NaN otherwise)
        parts.append(f"pool v{int(version):04d}")
    phases = ", ".join(f"{p} {row[f'time_{p}']:.2f}" for p in PHASES if isinstance(row.get(f"time_{p}"), numbers.Real))
    if isinstance(row.get("time_step"), numbers.Real):
        parts.append(f"{row['time_step']:.2f} s/step" + (f" ({phases})" if phases else ""))
    return "  ".join(parts)


def _known(row: dict, key: str) -> bool:
    value = row.get(key)
    return isinstance(value, numbers.Real) and value == value  # present and not NaN


def _replay_parts(row: dict) -> list[str]:
    """`age 1.5 (max 3)  buffer 120 (35% replayed)  flat groups 0.50->0.00  rl-zvp 0.25 of groups  m2po masked
    0.06% (M2 0.012)`, each only when it has a value: the replayed rows' age when some were replayed, the
    strategy's buffer, the share of flat groups before and after replay when replay changed it, the groups RL-ZVP
    trained on, M2PO's masked tokens and the second moment before masking."""
    parts = []
    if _known(row, "replay_age_mean") and row.get("replay_rows"):
        parts.append(f"age {row['replay_age_mean']:.1f} (max {row['replay_age_max']:.0f})")
    if _known(row, "replay_buffer_size"):
        used = f" ({row['replay_buffer_utilisation']:.0%} replayed)" if _known(row, "replay_buffer_utilisation") else ""
        parts.append(f"buffer {row['replay_buffer_size']:.0f}{used}")
    before, after = row.get("zero_std_group_frac_fresh"), row.get("zero_std_group_frac")
    if _known(row, "zero_std_group_frac_fresh") and _known(row, "zero_std_group_frac") and before != after:
        parts.append(f"flat groups {before:.2f}->{after:.2f}")
    if row.get("zvp_group_frac"):
        parts.append(f"rl-zvp {row['zvp_group_frac']:.2f} of groups")
    if _known(row, "m2po_masked_frac"):
        parts.append(f"m2po masked {row['m2po_masked_frac']:.2%} (M2 {row['m2po_m2']:.3g})")
    return parts


def eval_line(step: int, rows: list[dict]) -> str:
    """`held-out at step 10: avg@1 0.450 over 300 problems (tiny-math/decimal 0.500, ...)`."""
    overall = next((r for r in rows if r["data_source"] == "all"), rows[-1])
    sources = ", ".join(f"{r['data_source']} {r['avg_at_k']:.3f}" for r in rows if r is not overall)
    line = (
        f"held-out at step {step}: avg@{overall['k']} {overall['avg_at_k']:.3f} over {overall['n_problems']} problems"
    )
    return line + (f" ({sources})" if sources else "")


# ---------------------------------------------------------------- writers


class ScalarWriter(Protocol):
    def scalars(self, step: int, values: dict[str, float]) -> None: ...

    def close(self) -> None: ...


class TensorBoardWriter:
    """Scalars as TensorBoard event files in `log_dir` (torch.utils.tensorboard)."""

    def __init__(self, log_dir: Path, first_step: int, settings: str | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        # purge_step: events at or after it, left by an interrupted run, are hidden by TensorBoard's reader.
        self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=first_step)
        if settings is not None:
            self.writer.add_text("settings", f"```\n{settings}\n```", global_step=first_step)

    def scalars(self, step: int, values: dict[str, float]) -> None:
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, global_step=step)
        self.writer.flush()  # watchable while the run goes on, not only at its end

    def close(self) -> None:
        self.writer.close()


class MLflowWriter:
    """Scalars as metrics of one MLflow run in the SQLite store `path` (experiment `rlep`, run named as the
    training run). A fresh run starts a new MLflow run; a resumed one continues the latest of that name.
    SQLite, not a directory store: MLflow 3.17 refuses a new `./mlruns` store unless MLFLOW_ALLOW_FILE_STORE is set."""

    KEY = re.compile(r"[^\w\-. /]")  # characters MLflow refuses in metric names

    def __init__(self, path: Path, run_name: str, resumed: bool, settings: dict | None = None) -> None:
        check_tracker("mlflow")
        from mlflow.tracking import MlflowClient

        path.parent.mkdir(parents=True, exist_ok=True)
        self.client = MlflowClient(tracking_uri=f"sqlite:///{path.resolve()}")
        experiment = self.client.get_experiment_by_name(MLFLOW_EXPERIMENT)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(MLFLOW_EXPERIMENT)
        earlier = self.client.search_runs(
            [experiment_id],
            filter_string=f"tags.`mlflow.runName` = '{run_name}'",
            order_by=["attributes.start_time DESC"],
            max_results=1,
        )
        if resumed and earlier:
            self.run_id = earlier[0].info.run_id
        else:
            self.run_id = self.client.create_run(experiment_id, run_name=run_name).info.run_id
            for key, value in (settings or {}).items():
                self.client.log_param(self.run_id, key, value)

    def scalars(self, step: int, values: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(self.KEY.sub("_", key), value, now, step) for key, value in values.items()]
        for start in range(0, len(metrics), 1000):  # MLflow's batch limit
            self.client.log_batch(self.run_id, metrics=metrics[start : start + 1000])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def open_writer(
    kind: Tracker, out: Path, run_name: str, first_step: int, settings: dict | None = None
) -> ScalarWriter | None:
    """The writer of `kind` for the run in `out` (None for `none`). `first_step` <= 1: a fresh run."""
    check_tracker(kind)
    fresh = first_step <= 1
    if kind == "tensorboard":
        text = json.dumps(settings, indent=2, default=str) if settings is not None and fresh else None
        return TensorBoardWriter(TrainRunLayout(out).tensorboard, 0 if fresh else first_step, text)
    if kind == "mlflow":
        flat = _flatten(settings or {}) if fresh else None
        return MLflowWriter(TrainRunLayout(out).mlflow, run_name, resumed=not fresh, settings=flat)
    return None


def _flatten(settings: dict, prefix: str = "") -> dict[str, str]:
    flat = {}
    for key, value in settings.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = str(value)[:500]  # MLflow's parameter value limit
    return flat


# ---------------------------------------------------------------- the callback


class StepReport:
    """An `on_step(row, eval_rows)` callback: the tracker's scalars and a log line per step and evaluation,
    then `then(row, eval_rows)` (e.g. the Prefect flow's artifacts)."""

    def __init__(
        self,
        kind: Tracker,
        out: Path,
        steps: int,
        run_name: str,
        settings: dict | None = None,
        then: OnStep | None = None,
    ) -> None:
        check_tracker(kind)
        self.kind, self.out, self.steps, self.run_name = kind, Path(out), steps, run_name
        self.settings, self.then = settings, then
        self.writer: ScalarWriter | None = None

    def __call__(self, row: dict, eval_rows: list[dict] | None) -> None:
        step = int(row["step"])
        if self.writer is None and self.kind != "none":
            self.writer = open_writer(self.kind, self.out, self.run_name, step, self.settings)
        scalars = {f"train/{key}": value for key, value in numeric_columns(row).items()}
        if scalars:
            log.info(step_line(row, self.steps))
        if eval_rows:
            log.info(eval_line(step, eval_rows))
            scalars.update(eval_scalars(eval_rows))
        if self.writer is not None and scalars:
            self.writer.scalars(step, scalars)
        if self.then is not None:
            self.then(row, eval_rows)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


class TrackedRun(Protocol):
    """What `step_report` reads of a run's settings: a TrainConfig has it. Named here rather than imported: the
    loop's files need no settings model to write a run's metrics."""

    tracker: Tracker
    out: Path
    steps: int

    def resolved_run_id(self) -> str: ...

    def model_dump(self, *, mode: str) -> dict: ...


@contextmanager
def step_report(config: TrackedRun, then: OnStep | None = None) -> Iterator[StepReport]:
    """The `StepReport` of a training run's settings, closed (event files flushed) when the block ends."""
    report = StepReport(
        config.tracker,
        Path(config.out),
        config.steps,
        config.resolved_run_id(),
        settings=config.model_dump(mode="json"),
        then=then,
    )
    try:
        yield report
    finally:
        report.close()
