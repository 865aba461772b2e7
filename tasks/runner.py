"""Where parallel work runs: in this process, one piece after another, or on Ray (a local Ray started for the
command, or an existing cluster). The study fans out its (arm, seed) runs with it, a collection its shards
(one vLLM engine per Ray worker: data-parallel generation). The Prefect side is in flows/ray_runner.py."""

from __future__ import annotations

import math
import os
from pathlib import Path


def worker_threads(cpus_per_run: float) -> int:
    """Threads of one run or shard on a Ray worker: its whole CPUs, at least one."""
    return max(1, math.floor(cpus_per_run))


def limit_threads(threads: int) -> None:
    """Keep this worker's torch and OpenMP threads (vLLM's included) to its share of the cores. Called at the
    start of a run or shard on a Ray worker, where by default each would use every core of the machine."""
    import torch

    torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    # vLLM on the CPU binds its OpenMP threads to every core by default: two workers side by side would then
    # spin on the same cores. Unbound, it keeps the thread count set above.
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")


def module_env(**extra: str) -> dict[str, str]:
    """The environment of a fresh interpreter that runs one of the project's modules (`python -m rlep.tasks...`):
    this process's, with the project root first on PYTHONPATH (so it imports the same code, whatever the
    working directory) and `extra` on top. (verifiers/sandbox.py, below tasks, starts its workers alike.)"""
    root = str(Path(__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}
