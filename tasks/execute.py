"""One executor for the runs of a plan (`tasks.plan`), for the pipeline and the study alike.

`execute_plan` carries a plan out, each run after the runs it needs: in this process, through Prefect and on
Ray alike. `execute_run` does one run (train and evaluate the last checkpoint, collect, or evaluate a model)
given the results of the runs it needs, through `Stages`: plain functions here (`local_stages`), Prefect
subflows in `flows/subflows.py`; `execute_in_process` does it in a process of its own. A living-pool arm's parts
(`tasks.plan`, `tasks.living_pool`) are runs too: a training part trains through the same stage to its last
step, a re-collection collects through the same stage and publishes a new version of the arm's store, and the
last part is evaluated like any training run. A run that finished with the same settings from the same
starting weights is not run again (its record, written last, says so; a living-pool part, when its checkpoint
or its store's version exists), and a killed training run resumes from its last checkpoint, so a killed
pipeline or study goes on where it stopped. A finished or killed run whose settings differ is started over
(a living-pool arm by its first part, store included), never mixed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rlep.data.fs import write_text_atomic
from rlep.data.run_layout import CollectRunLayout, EvalRunLayout, TrainRunLayout
from rlep.tasks.collect_config import CollectConfig
from rlep.tasks.evaluate import EvalConfig
from rlep.tasks.plan import Run
from rlep.tasks.runner import limit_threads
from rlep.tasks.training.config import TrainConfig


@dataclass
class Stages:
    """How each kind of run is carried out (plain functions, or Prefect subflows)."""

    collect: Callable[[CollectConfig], Any]  # -> anything; the run's directory holds the result
    train: Callable[[TrainConfig, bool], Any]  # (settings, resume) -> an object with `.final_checkpoint`
    evaluate: Callable[[EvalConfig], Any]


def local_stages(progress: bool = True) -> Stages:
    """Plain (Prefect-free) stage functions: each stage runs in this process."""
    from rlep.tasks.collect import run_collection
    from rlep.tasks.engines.cache import release_engines
    from rlep.tasks.evaluate import evaluate
    from rlep.tasks.training.trainer import train

    def collect(config: CollectConfig) -> Any:
        try:
            return run_collection(config, progress=progress)
        finally:
            release_engines()

    def evaluate_released(config: EvalConfig) -> Any:
        try:
            return evaluate(config, progress=progress)
        finally:
            release_engines()

    return Stages(
        collect=collect,
        train=lambda config, resume: train(config, resume=resume, progress=progress),
        evaluate=evaluate_released,
    )


def execute_plan(runs: list[Run], execute: Callable[[Run, dict[str, Any]], Any]) -> dict[str, Any]:
    """Carry out a plan's `runs` (listed in an order that respects `needs`): `execute(run, the results of the runs
    it needs, by key)` for each in turn; returns every run's result by key. `execute` is `execute_run` or
    `execute_in_process` with their options, a Prefect task, or a task's submission to Ray (whose results are
    futures the next submissions wait for)."""
    results: dict[str, Any] = {}
    for run in runs:
        results[run.key] = execute(run, {key: results[key] for key in run.needs})
    return results


def execute_run(
    run: Run,
    results: dict[str, dict],
    stages: Stages | None = None,
    progress: bool = True,
    threads: int | None = None,
    reuse: bool = True,
) -> dict:
    """Carry out `run` (the records of the runs it needs in `results`) unless it already finished; returns its
    record: `key`, `out`, and `final_checkpoint` / `final_eval` (train), `pool_source` (collect). With `reuse`
    False (a benchmark, which must measure) anything in the run's directory is removed first."""
    if threads is not None:  # one run per Ray worker: its share of the cores, not all of them
        limit_threads(threads)
    stages = stages or local_stages(progress)
    if not reuse and not run.continues:  # a living-pool arm is started over by its first part
        _start_over(run)
    if run.kind in ("collect", "recollect"):
        return _collect(run, results, stages)
    if run.kind == "evaluate":
        return _finished_or(run, lambda: _evaluate(run, stages))
    if run.span is not None and run.span[1] < run.config.steps:
        return _train_part(run, stages)
    return _finished_or(run, lambda: _train(run, stages), lambda final: _evaluated(run, stages, final))


def settings_digest(run: Run) -> str:
    """What a finished run's record must match to be reused: its settings, its evaluation's and its pool's life."""
    parts = [run.config.model_dump_json(), run.evaluate.model_dump_json() if run.evaluate else ""]
    if run.living is not None:
        parts.append(repr((run.living.every, run.living.collect.model_dump_json())))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _identity(run: Run, hashes: dict[str, str | None] | None = None) -> dict:
    """What a run's record must hold for the run to count as finished: its starting weights and settings.
    `hashes` (model -> hash), when given, keeps the hashes already taken (several runs start from one model)."""
    hashes = {} if hashes is None else hashes
    if run.config.model not in hashes:
        hashes[run.config.model] = _start_weights(run.config.model)
    return {"start_weights": hashes[run.config.model], "settings": settings_digest(run)}


def finished_record(run: Run, hashes: dict[str, str | None] | None = None) -> dict | None:
    """The record of `run` if it finished with its settings from its starting weights (so it would not run again),
    else None. (A collection has no record: its manifest says it finished.) `hashes`: as `_identity`'s, for a
    caller checking many runs at once."""
    record = _record(run)
    return record if record is not None and _matches(record, _identity(run, hashes)) else None


def _record(run: Run) -> dict | None:
    done = EvalRunLayout(run.config.out).record
    return json.loads(done.read_text()) if done.is_file() else None


def _matches(record: dict, identity: dict) -> bool:
    return all(record.get(name) == value for name, value in identity.items())


def _finished_or(run: Run, carry_out: Callable[[], dict], evaluate_again: Callable[[str], dict] | None = None) -> dict:
    out = Path(run.config.out)
    identity = _identity(run)
    done = EvalRunLayout(out).record
    record = _record(run)
    if record is not None and _matches(record, identity):
        return record
    if record is not None:
        final = record.get("final_checkpoint")
        if (
            evaluate_again
            and final
            and record.get("start_weights") == identity["start_weights"]
            and _trained_alike(run)
        ):
            # The same training, its settings written in an earlier layout (the digest is of the dump): keep
            # the checkpoints; the evaluation, which the digest also covers, is done again.
            print(f"{run.key}: {out} finished with the same training settings; evaluating it again")
            carry_out = lambda: evaluate_again(final)  # noqa: E731
        else:
            print(f"{run.key}: {out} finished with other settings or starting weights; running it again")
            _start_over(run)
    elif run.kind == "train" and not _same_training(out, run.config):
        print(f"{run.key}: {out} holds a run with other settings; starting it over")
        _start_over(run)
    record = {"key": run.key, "out": str(out), **carry_out(), **identity, "process": os.getpid()}
    write_text_atomic(done, json.dumps(record, indent=2))
    return record


def _start_over(run: Run) -> None:
    """Remove what `run` wrote: its directory and, for a living-pool arm, its pool store."""
    for path in (run.config.out, run.living.store if run.living is not None else None):
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)


def _train(run: Run, stages: Stages) -> dict:
    """Train `run` (a whole run, or a living-pool arm's last part) to its last step, resuming its checkpoint."""
    from rlep.tasks.training.backends.checkpoint import latest_checkpoint

    final_checkpoint = stages.train(run.config, latest_checkpoint(run.config.out) is not None).final_checkpoint
    return _evaluated(run, stages, str(final_checkpoint))


def _train_part(run: Run, stages: Stages) -> dict:
    """A living-pool arm's part before its last: train to its end unless a checkpoint there or later exists. The
    first part checks that the arm's directory and store hold this arm's run (or clears them) and starts the
    store from the collected pool."""
    from rlep.tasks.living_pool import last_saved_step, start_store
    from rlep.tasks.training.backends.checkpoint import latest_checkpoint

    out, end = Path(run.config.out), run.span[1]
    if not run.continues:
        _same_arm_or_start_over(run)
        start_store(run.living, out)
    if last_saved_step(out) < end:
        stages.train(run.config.model_copy(update={"steps": end}), latest_checkpoint(out) is not None)
    return {"key": run.key, "out": str(out), "final_checkpoint": str(TrainRunLayout(out).checkpoint(end))}


def _same_arm_or_start_over(run: Run) -> None:
    """Before a living-pool arm's first part: its record (written by its last part) or the settings its
    directory holds are this arm's, or the arm starts over, store included (its versions would otherwise pass
    for re-collections already done)."""
    out = Path(run.config.out)
    record = _record(run)
    if record is not None:
        if not _matches(record, _identity(run)):
            print(f"{run.key}: {out} finished with other settings or starting weights; running it again")
            _start_over(run)
    elif not _same_training(out, run.config):
        print(f"{run.key}: {out} holds a run with other settings; starting it over")
        _start_over(run)


def _evaluated(run: Run, stages: Stages, final_checkpoint: str) -> dict:
    """The training run's record, once its final checkpoint is evaluated (if the plan evaluates it)."""
    record = {"final_checkpoint": final_checkpoint}
    if run.evaluate is not None:
        stages.evaluate(run.evaluate.model_copy(update={"model": final_checkpoint}))
        record["final_eval"] = str(run.evaluate.out)
    return record


def _evaluate(run: Run, stages: Stages) -> dict:
    stages.evaluate(run.config)
    return {"final_eval": str(run.config.out)}


def _collect(run: Run, results: dict[str, dict], stages: Stages) -> dict:
    """Collect from the checkpoint of the run it needs (the exploration, or a living-pool arm's part), or from
    its own model; a finished collection with the same settings is kept, a killed one resumes its own shards. A
    living-pool arm's re-collection is published as a new version of its store, once."""
    from rlep.tasks.living_pool import collected_after, publish_recollection

    config = run.config
    if run.needs:
        config = config.model_copy(update={"model": results[run.needs[0]]["final_checkpoint"]})
    out = CollectRunLayout(config.out)
    record = {"key": run.key, "out": str(out.root), "pool_source": config.model}
    if run.kind == "recollect" and run.span[1] in collected_after(run.living.store):
        return record
    if out.manifest.is_file() and not _collected_alike(out, config):
        print(f"{run.key}: {out.root} was collected with other settings or from another model; collecting again")
        shutil.rmtree(out.root)
    if not out.manifest.is_file():
        stages.collect(config)
    if run.kind == "recollect":
        publish_recollection(run.living, config, run.span[1])
    return record


def _trained_alike(run: Run) -> bool:
    """`run` is a training run whose directory holds the same settings, steps included, read with today's
    models (a layout change of the settings does not count), and which has no living pool to re-check."""
    if run.kind != "train" or run.living is not None:
        return False
    saved = _saved_training(run.config.out)
    return saved is not None and _as_requested(saved, run.config).model_dump() == run.config.model_dump()


def _collected_alike(out: CollectRunLayout, config: CollectConfig) -> bool:
    """The finished collection in `out` has `config`'s settings, read with today's models (a layout change of
    the settings, such as the problem source's union, does not count)."""
    saved = json.loads(out.manifest.read_text()).get("parameters")
    try:
        return CollectConfig.model_validate(saved).model_dump() == config.model_dump()
    except ValidationError:
        return False


def _same_training(out: Path, config: TrainConfig) -> bool:
    """A killed run in `out` may be resumed: no settings there yet, or the same ones (steps aside: a living-pool
    run trains in segments; the pool aside: a run pins its store's version)."""
    before = _saved_training(out)
    if before is None:
        return True
    ignore = {"steps": True, "replay": {"pool"}}
    return _as_requested(before, config).model_dump(exclude=ignore) == config.model_dump(exclude=ignore)


def _as_requested(saved: TrainConfig, config: TrainConfig) -> TrainConfig:
    """`saved` with a concrete precision read as `auto` where `config` asks for `auto` and `auto` picks that
    precision on this machine: a run saved before `auto` was the default trained as an `auto` run would here.
    (A run saved with `auto` compares as `auto`: what it resolved to is recorded beside its settings.)"""
    if config.backend.precision != "auto" or saved.backend.precision == "auto":
        return saved
    import torch

    from rlep.tasks.training.backends.precision import resolve_precision
    from rlep.tasks.training.generation.async_gen import update_device

    here = resolve_precision("auto", update_device(config.generator_gpus, torch.cuda.device_count())).precision
    if here != saved.backend.precision:
        return saved
    return saved.model_copy(update={"backend": saved.backend.model_copy(update={"precision": "auto"})})


def _saved_training(out: Path | str) -> TrainConfig | None:
    """The settings a training run in `out` saved, read with today's models (None: none saved yet)."""
    saved = TrainRunLayout(out).config
    return TrainConfig.model_validate_json(saved.read_text()) if saved.is_file() else None


def _start_weights(model: str) -> str | None:
    """The hash of the starting weights when `model` is a local directory (a study resolves `tiny` to one)."""
    from rlep.data.fs import weights_hash

    return weights_hash(model) if Path(model).is_dir() else None


def execute_in_process(
    run: Run, results: dict[str, dict], progress: bool = True, reuse: bool = True, stages: Stages | None = None
) -> dict:
    """`execute_run` in a fresh process (spawned, so nothing of this one is inherited): the run's timings carry
    nothing that earlier runs left behind (threads, caches, allocator state). `stages` (default: plain
    functions) must pickle: the pipeline flow's are subflows of its own run, entered again in the new process
    (`flows/subflows.py`). Its log records come back and are handled here, in the calling thread, so they reach
    whatever this thread logs to (a Prefect task run's Logs tab included); an exception in the run is raised
    here."""
    import multiprocessing
    import queue as queue_module

    context = multiprocessing.get_context("spawn")
    records = context.Queue()

    def forward() -> None:
        while True:
            try:
                record = records.get_nowait()
            except queue_module.Empty:
                return
            logging.getLogger(record.name).handle(record)

    pool = context.Pool(1, initializer=_log_to_queue, initargs=(records,))
    try:
        pending = pool.apply_async(execute_run, (run, results, stages), {"progress": progress, "reuse": reuse})
        while not pending.ready():
            pending.wait(0.2)
            forward()
        forward()
        record = pending.get()
        pool.close()  # a clean exit of the worker, then of its queues (nothing left for the resource tracker)
        pool.join()
        return record
    finally:
        pool.terminate()  # after an error or Ctrl-C: stop the run's process
        records.close()
        records.join_thread()


def _log_to_queue(records) -> None:
    """In the spawned process: every record of the `rlep` loggers goes back to the parent."""
    from logging.handlers import QueueHandler

    logger = logging.getLogger("rlep")
    logger.addHandler(QueueHandler(records))
    logger.setLevel(logging.INFO)
    logger.propagate = False
