"""An action of a plan's run, as the executor (`tasks.execute`) decides it, and the plain ways to carry it out.

The executor decides what a run does next (an `Action`: collect, train or evaluate, with its settings) and
records what it gave (an `Outcome`); its caller carries each action out with a carrier, `carrier(action) ->
Outcome`: `local_stages()` (plain functions in this process), `InFreshProcess` (the same in a fresh spawned
process, its log records forwarded), or the Prefect subflows of `flows/subflows.py`, here or on Ray. A carrier
does one action and returns; it decides nothing and calls nothing back.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from rlep.tasks.settings.collect import CollectConfig
    from rlep.tasks.settings.evaluate import EvalConfig
    from rlep.tasks.settings.train import TrainConfig


@dataclass(frozen=True)
class Action:
    """What a run does next, as the executor decided it: its caller carries it out."""

    kind: Literal["collect", "train", "evaluate"]
    config: CollectConfig | TrainConfig | EvalConfig
    key: str  # the run's key (a task run's name, a log line's)
    resume: bool = False  # train: continue from the run's last checkpoint


@dataclass(frozen=True)
class Outcome:
    """What carrying out an action gave: the stage's result and the process it ran in (the run's record says)."""

    result: Any  # train: an object with `final_checkpoint`; collect, evaluate: their results
    process: int


Carrier = Callable[[Action], Outcome]


@dataclass
class Stages:
    """A carrier from one function per kind of action (plain functions, Prefect subflows, a test's recorders),
    each called in this process."""

    collect: Callable[[CollectConfig], Any]  # -> anything; the run's directory holds the result
    train: Callable[[TrainConfig, bool], Any]  # (settings, resume) -> an object with `.final_checkpoint`
    evaluate: Callable[[EvalConfig], Any]

    def __call__(self, action: Action) -> Outcome:
        if action.kind == "train":
            result = self.train(action.config, action.resume)
        elif action.kind == "collect":
            result = self.collect(action.config)
        else:
            result = self.evaluate(action.config)
        return Outcome(result, os.getpid())


def local_stages(progress: bool = True) -> Stages:
    """Plain (Prefect-free) stage functions: each action is carried out in this process."""
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


@dataclass(frozen=True)
class InFreshProcess:
    """Carries an action out with `local_stages` in a fresh process (spawned, so nothing of this one is inherited):
    its timings carry nothing that earlier runs left behind (threads, caches, allocator state). Its log records
    come back and are handled here, in the calling thread, so they reach whatever this thread logs to; an
    exception in it is raised here."""

    progress: bool = True

    def __call__(self, action: Action) -> Outcome:
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
            pending = pool.apply_async(_carry_out_here, (action, self.progress))
            while not pending.ready():
                pending.wait(0.2)
                forward()
            forward()
            outcome = pending.get()
            pool.close()  # a clean exit of the worker, then of its queues (nothing left for the resource tracker)
            pool.join()
            return outcome
        finally:
            pool.terminate()  # after an error or Ctrl-C: stop the action's process
            records.close()
            records.join_thread()


def _carry_out_here(action: Action, progress: bool) -> Outcome:
    """In the spawned process: the action, by plain functions."""
    return local_stages(progress)(action)


def _log_to_queue(records) -> None:
    """In the spawned process: every record of the `rlep` loggers goes back to the parent."""
    from logging.handlers import QueueHandler

    logger = logging.getLogger("rlep")
    logger.addHandler(QueueHandler(records))
    logger.setLevel(logging.INFO)
    logger.propagate = False
