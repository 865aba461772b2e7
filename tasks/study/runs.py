"""Execute a study's runs (each skipped when a finished copy is on disk) and gather their results as tables."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from data.fs import write_text_atomic
from data.metrics import ALL_SOURCES
from data.run_layout import TrainRunLayout
from tasks.runner import limit_threads
from tasks.study.config import Run

DONE_FILE = "study_run.json"  # written last: a run directory holding it is finished


def execute_run(run: Run, results: dict[str, dict], progress: bool = True, threads: int | None = None) -> dict:
    """Run `run` (its `needs` results in `results`) unless it already finished; returns its result record."""
    if threads is not None:  # one run per Ray worker: its share of the cores, not all of them
        limit_threads(threads)
    if run.kind == "collect":
        return _collect(run, results, progress)
    out = Path(run.config.out)
    start = _start_weights(run.config.model)
    if (out / DONE_FILE).is_file():
        done = json.loads((out / DONE_FILE).read_text())
        if done.get("start_weights") == start:
            return done
        # Finished from other starting weights (the default model changed since): not comparable, run again.
        import shutil

        shutil.rmtree(out)
    from tasks.engines.cache import release_engines
    from tasks.evaluate import evaluate
    from tasks.tracking import step_report
    from tasks.training.checkpoint import latest_checkpoint
    from tasks.training.trainer import train

    with step_report(run.config) as report:  # the run's tracker, and a log line per step (rlep.train)
        trained = train(run.config, resume=latest_checkpoint(out) is not None, progress=progress, on_step=report)
    record = {"key": run.key, "out": str(out), "final_checkpoint": str(trained.final_checkpoint), "start_weights": start}
    if run.evaluate is not None:
        try:
            evaluate(run.evaluate.model_copy(update={"model": str(trained.final_checkpoint)}), progress=progress)
        finally:
            release_engines()
        record["final_eval"] = str(run.evaluate.out)
    write_text_atomic(out / DONE_FILE, json.dumps(record, indent=2))
    return record


def _start_weights(model: str) -> str | None:
    """The hash of the starting weights when `model` is a local directory (a study resolves `tiny` to one)."""
    from data.fs import weights_hash

    return weights_hash(model) if Path(model).is_dir() else None


def _collect(run: Run, results: dict[str, dict], progress: bool) -> dict:
    out = Path(run.config.out)
    explore = results[run.needs[0]]
    if not (out / "manifest.json").is_file():  # a killed collection resumes its own shards
        from tasks.collect import run_collection
        from tasks.engines.cache import release_engines

        try:
            run_collection(run.config.model_copy(update={"model": explore["final_checkpoint"]}), progress=progress)
        finally:
            release_engines()
    return {"key": run.key, "out": str(out), "pool_source": explore["final_checkpoint"]}


def gather(runs: list[Run]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per evaluation step, final evaluation) tables over every finished arm run.

    Per step: arm, seed, step, accuracy (held-out avg@k of the training run's evaluation), tokens_generated
    (generated so far), wall_seconds (training seconds so far, evaluation excluded). Final: arm, seed, k,
    avg_at_k, pass_at_k, maj_at_k of the final evaluation.
    """
    steps, finals = [], []
    for run in runs:
        if run.kind != "train" or run.arm is None:
            continue
        out = Path(run.config.out)
        layout = TrainRunLayout(out)
        ev = pd.read_parquet(layout.eval)
        ev = ev[ev.data_source == ALL_SOURCES][["step", "avg_at_k"]]
        metrics = pd.read_parquet(layout.metrics).sort_values("step")
        progress = pd.DataFrame({"step": [0, *metrics.step], "tokens_generated": [0, *metrics.tokens_generated_total],
                                 "wall_seconds": [0.0, *metrics.time_step.cumsum()]})  # fmt: skip
        rows = ev.merge(progress, on="step", how="left").rename(columns={"avg_at_k": "accuracy"})
        steps.append(rows.assign(arm=run.arm, seed=run.seed))
        final = layout.final_eval.eval
        if final.is_file():
            fe = pd.read_parquet(final)
            fe = fe[fe.data_source == ALL_SOURCES][["k", "avg_at_k", "pass_at_k", "maj_at_k"]]
            finals.append(fe.assign(arm=run.arm, seed=run.seed))
    study = pd.concat(steps, ignore_index=True)[["arm", "seed", "step", "accuracy", "tokens_generated", "wall_seconds"]]
    final = pd.concat(finals, ignore_index=True) if finals else pd.DataFrame(columns=["arm", "seed", "k", "avg_at_k", "pass_at_k", "maj_at_k"])
    return study.sort_values(["arm", "seed", "step"], ignore_index=True), final
