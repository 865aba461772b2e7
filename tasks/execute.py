"""One executor for the runs of a plan (`tasks.plan`), for the pipeline and the study alike: it decides, the
caller does.

`decide` turns one run (train and evaluate the last checkpoint, collect, or evaluate a model), given the results
of the runs it needs, into its actions one at a time (`tasks.carry.Action`: collect, train or evaluate) and
records what they gave; the caller carries each action out with a carrier (`tasks.carry`: plain functions here
or in a fresh process; Prefect subflows, here or on Ray, in `flows/subflows.py`) and sends back its outcome.
`execute_run` is that loop for one run, `execute_plan` for a plan, each run after the runs it needs (one after
another, or each in a thread of its own once they have finished). A living-pool arm's parts (`tasks.plan`,
`tasks.living_pool`) are runs too: a training part trains to its last step, a re-collection collects and
publishes a new version of the arm's store, and the last part is evaluated like any training run. A run that
finished with the same settings from the same starting weights is not run again (its record, written last, says
so; a living-pool part, when its checkpoint or its store's version exists), and a killed training run resumes
from its last checkpoint, so a killed pipeline or study goes on where it stopped. A finished or killed run whose
settings differ is started over (a living-pool arm by its first part, store included), never mixed: whether
settings are the same is `tasks.reuse`'s to say (versioned digests of resolved settings).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

from rlep.data.fs import write_text_atomic
from rlep.data.run_layout import CollectRunLayout, EvalRunLayout, TrainRunLayout
from rlep.tasks import reuse
from rlep.tasks.carry import Action, Carrier, Outcome, local_stages
from rlep.tasks.plan import Run

# A run's actions, one at a time: each yielded for the caller to carry out, its `Outcome` sent back; the run's
# record returned.
Decision = Generator[Action, Outcome, dict]


def execute_plan(
    runs: list[Run], execute: Callable[[Run, dict[str, Any]], Any], parallel: bool = False
) -> dict[str, Any]:
    """Carry out a plan's `runs` (listed in an order that respects `needs`): `execute(run, the results of the runs
    it needs, by key)` for each, one after another or, with `parallel`, each in a thread of its own as soon as the
    runs it needs have finished (for carriers that wait on other machines: Ray); returns every run's result by
    key. `execute` is `execute_run` with a carrier."""
    if parallel:
        return _execute_concurrently(runs, execute)
    results: dict[str, Any] = {}
    for run in runs:
        results[run.key] = execute(run, {key: results[key] for key in run.needs})
    return results


def _execute_concurrently(runs: list[Run], execute: Callable[[Run, dict[str, Any]], Any]) -> dict[str, Any]:
    """Each run in a thread of its own (with the caller's context: a Prefect flow run's), waiting for the runs it
    needs; an error in a run is raised by the runs that need it, and here."""
    import contextvars
    from concurrent.futures import Future, ThreadPoolExecutor

    def after(run: Run, needs: dict[str, Future]) -> Any:
        return execute(run, {key: future.result() for key, future in needs.items()})

    futures: dict[str, Future] = {}
    with ThreadPoolExecutor(max_workers=max(len(runs), 1), thread_name_prefix="run") as pool:
        for run in runs:  # one thread per run: a run waiting for another never holds up one that could go
            needs = {key: futures[key] for key in run.needs}
            futures[run.key] = pool.submit(contextvars.copy_context().run, after, run, needs)
    return {key: future.result() for key, future in futures.items()}


def execute_run(
    run: Run, results: dict[str, dict], carry_out: Carrier | None = None, progress: bool = True, reuse: bool = True
) -> dict:
    """Carry out `run` (the records of the runs it needs in `results`) unless it already finished: each action
    `decide` gives, by `carry_out` (default: plain functions in this process); returns its record: `key`, `out`,
    and `final_checkpoint` / `final_eval` (train), `pool_source` (collect). With `reuse` False (a benchmark,
    which must measure) anything in the run's directory is removed first."""
    carry_out = carry_out or local_stages(progress)
    actions = decide(run, results, reuse)
    try:
        action = next(actions)
        while True:
            action = actions.send(carry_out(action))
    except StopIteration as finished:
        return finished.value


def decide(run: Run, results: dict[str, dict], reuse: bool = True) -> Decision:
    """`run`'s actions, each decided from what its directory holds and what the one before gave: yielded for the
    caller to carry out, its `Outcome` sent back; returns the run's record, written last (a run that finished
    with the same settings from the same starting weights yields nothing). With `reuse` False the run's directory
    is removed first."""
    if not reuse and not run.continues:  # a living-pool arm is started over by its first part
        _start_over(run)
    if run.kind in ("collect", "recollect"):
        return (yield from _collect(run, results))
    if run.kind == "evaluate":
        return (yield from _finished_or(run, lambda: _evaluate(run)))
    if run.span is not None and run.span[1] < run.config.steps:
        return (yield from _train_part(run))
    return (yield from _finished_or(run, lambda: _train(run), lambda final: _evaluated(run, final)))


def _finished_or(
    run: Run, carry_out: Callable[[], Decision], evaluate_again: Callable[[str], Decision] | None = None
) -> Decision:
    """The run's record if it finished with its settings, else what `carry_out` decides (only the evaluation again,
    `evaluate_again`, where the same training finished), then its record, written."""
    out = Path(run.config.out)
    found = reuse.verdict(run, evaluate_again=evaluate_again is not None)
    if found.action == "reuse":
        return found.record
    if found.why:
        print(found.why)
    if found.action == "evaluate-again":  # the checkpoints kept; the evaluation, which the digest covers, again
        carry_out = lambda: evaluate_again(found.final)  # noqa: E731
    elif found.action == "start-over":
        _start_over(run)
    carried = yield from carry_out()
    process = carried.pop("process", os.getpid())  # where the run's own action ran (none: here)
    record = {"key": run.key, "out": str(out), **carried, **found.identity, "process": process}
    write_text_atomic(EvalRunLayout(out).record, json.dumps(record, indent=2))
    return record


def _start_over(run: Run) -> None:
    """Remove what `run` wrote: its directory and, for a living-pool arm, its pool store."""
    for path in (run.config.out, run.living.store if run.living is not None else None):
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)


def _train(run: Run) -> Decision:
    """Train `run` (a whole run, or a living-pool arm's last part) to its last step, resuming its checkpoint."""
    from rlep.tasks.training.backends.checkpoint import latest_checkpoint

    resume = latest_checkpoint(run.config.out) is not None
    trained = yield Action("train", run.config, run.key, resume=resume)
    record = yield from _evaluated(run, str(trained.result.final_checkpoint))
    return {**record, "process": trained.process}


def _train_part(run: Run) -> Decision:
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
        resume = latest_checkpoint(out) is not None
        yield Action("train", run.config.model_copy(update={"steps": end}), run.key, resume=resume)
    return {"key": run.key, "out": str(out), "final_checkpoint": str(TrainRunLayout(out).checkpoint(end))}


def _same_arm_or_start_over(run: Run) -> None:
    """Before a living-pool arm's first part: its record (written by its last part) or the settings its
    directory holds are this arm's, or the arm starts over, store included (its versions would otherwise pass
    for re-collections already done)."""
    found = reuse.verdict(run)
    if found.action == "start-over":
        print(found.why)
        _start_over(run)


def _evaluated(run: Run, final_checkpoint: str) -> Decision:
    """The training run's record, once its final checkpoint is evaluated (if the plan evaluates it)."""
    record = {"final_checkpoint": final_checkpoint}
    if run.evaluate is not None:
        evaluated = yield Action("evaluate", run.evaluate.model_copy(update={"model": final_checkpoint}), run.key)
        record.update(final_eval=str(run.evaluate.out), process=evaluated.process)
    return record


def _evaluate(run: Run) -> Decision:
    evaluated = yield Action("evaluate", run.config, run.key)
    return {"final_eval": str(run.config.out), "process": evaluated.process}


def _collect(run: Run, results: dict[str, dict]) -> Decision:
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
    if out.manifest.is_file() and not reuse.collected_alike(out, config):
        print(f"{run.key}: {out.root} was collected with other settings or from another model; collecting again")
        shutil.rmtree(out.root)
    if not out.manifest.is_file():
        yield Action("collect", config, run.key)
    if run.kind == "recollect":
        publish_recollection(run.living, config, run.span[1])
    return record
