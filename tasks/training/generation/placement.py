"""Where async training runs: the cores and GPUs of the trainer and of the generator process (docs/async.md)."""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch


def split_cores() -> tuple[list[int], list[int]]:
    """(trainer cores, generator cores): this process's allowed cores cut in two halves, the generator on
    the upper one. With one core nothing is pinned (both lists empty)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return [], []
    half = len(cores) // 2
    return cores[:half], cores[half:]


def generator_gpu_env(gpus: Sequence[int], visible: str | None) -> str:
    """CUDA_VISIBLE_DEVICES of the generator process: `gpus` as the trainer numbers them, mapped through the
    trainer's own CUDA_VISIBLE_DEVICES (`visible`) when it has one."""
    ids = [d.strip() for d in visible.split(",")] if visible else None
    if ids is not None and max(gpus) >= len(ids):
        raise ValueError(
            f"generator_gpus {list(gpus)}: this process sees {len(ids)} GPUs (CUDA_VISIBLE_DEVICES={visible})"
        )
    return ",".join(ids[g] if ids is not None else str(g) for g in gpus)


def update_device(generator_gpus: Sequence[int], gpu_count: int) -> str:
    """The trainer's device: the CPU without GPUs; else the first GPU the generator does not use."""
    if gpu_count == 0:
        return "cpu"
    free = [g for g in range(gpu_count) if g not in set(generator_gpus)]
    if not free:
        raise ValueError(f"generator_gpus {list(generator_gpus)} takes all {gpu_count} GPUs; leave one for the update")
    return f"cuda:{free[0]}" if generator_gpus else "cuda"


class CoreShare:
    """The cores of an async run: the generator process on the upper half (pinned), the update on the lower
    half's threads while the generator works and on every core while it waits for work. Sync mode keeps
    about 95% of 2 cores busy, so an update confined to its half would make async slower, not faster
    (docs/async.md). Never more threads than torch had at the start (OMP_NUM_THREADS=1 keeps the update on
    one thread, for cores shared with other jobs). The trainer calls `adjust` before each micro-batch."""

    def __init__(self) -> None:
        trainer, self.generator_cores = split_cores()
        self.all = min(len(trainer) + len(self.generator_cores), torch.get_num_threads())
        self.own = min(len(trainer), self.all)
        self.adjust(generator_busy=True)

    def adjust(self, generator_busy: bool) -> None:
        threads = self.own if generator_busy else self.all
        if threads and threads != torch.get_num_threads():  # nothing to share on one core
            torch.set_num_threads(threads)
