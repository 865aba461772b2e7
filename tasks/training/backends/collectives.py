"""The training group's collectives: their tensors on the group's device, their failures told apart.

NCCL takes only CUDA tensors (a CPU tensor fails with "No backend type associated with device type cpu",
FIELD_NOTES "Checked 2026-11-26") and gloo only CPU ones, so every tensor this package hands a collective of
the training (default) group is made on `GROUP.device`: the rank's GPU under NCCL, the CPU under gloo.
`all_gather_object` and the DDP / FSDP2 / state-dict collectives place their own tensors on the current CUDA
device, which `init_distributed` sets to the rank's GPU. Rank 0's requests travel on a gloo group of their own
(`GROUP.commands`), as pickled objects on the CPU.

A request that fails is one of three things, and each is reported as what it is:

- out of memory on this rank (`torch.OutOfMemoryError`, or an allocator's "out of memory" message):
  `RankOutOfMemory`, naming the rank and the micro-batch size to lower;
- a lost rank (a `torch.distributed` error, or a closed connection or timeout in the backend's words):
  `DistributedError`, naming the request, bounded by `collective_timeout`;
- anything else (a bug, a bad batch): raised as it is, not blamed on another process.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

# Words of an allocator that ran out (CUDA's caching allocator, a CUDA kernel launch, the CPU allocator).
OUT_OF_MEMORY = re.compile(r"out of memory|can't allocate memory|not enough memory", re.IGNORECASE)
# Words of gloo and NCCL when a peer is gone or late (plain RuntimeErrors in some torch versions).
LOST_PEER = re.compile(
    r"gloo|nccl|connection|connect|closed|reset by peer|broken pipe|timed? ?out|socket|recv|send|watchdog|abort",
    re.IGNORECASE,
)


class DistributedError(RuntimeError):
    """A rank was lost or the process group could not form; the message says which request and what to do."""


class RankOutOfMemory(MemoryError):
    """A rank ran out of memory during a request; the message names the rank and the micro-batch size to lower."""


@dataclass
class TrainingGroup:
    """This process's place in the training group, set once by `init_distributed`."""

    commands: Any = None  # gloo group of rank 0's requests
    local_rank: int = 0
    timeout: float = 0.0  # collective_timeout, in seconds
    command_timeout: float = 0.0  # of the requests' group, in seconds
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))  # of the default group's tensors


GROUP = TrainingGroup()


def is_out_of_memory(err: BaseException) -> bool:
    return isinstance(err, torch.OutOfMemoryError) or bool(OUT_OF_MEMORY.search(str(err)))


def is_lost_rank(err: BaseException) -> bool:
    return isinstance(err, dist.DistError) or bool(LOST_PEER.search(str(err)))


def _place() -> tuple[int, int]:
    return (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return (text.splitlines()[0] if text else type(err).__name__)[:200]


@contextmanager
def named_out_of_memory(what: str, micro_batch_size: int | None = None) -> Iterator[None]:
    """Turn running out of memory into `RankOutOfMemory`: which rank, during what, and what to lower."""
    try:
        yield
    except RuntimeError as err:
        if not is_out_of_memory(err):
            raise
        rank, world = _place()
        size = (
            f"micro_batch_size {micro_batch_size}: lower it (--micro-batch-size {max(1, micro_batch_size // 2)})"
            if micro_batch_size
            else "micro_batch_size unset (the whole mini-batch in one pass): set one (--micro-batch-size)"
        )
        raise RankOutOfMemory(
            f"rank {rank} of {world} ran out of memory during {what} ({_first_line(err)}); {size}, or turn on "
            "activation_checkpointing, precision bf16 or strategy fsdp2; resume from the last complete checkpoint "
            "with --resume"
        ) from err


@contextmanager
def collective(what: str, micro_batch_size: int | None = None, timeout: float | None = None) -> Iterator[None]:
    """Run a request's collectives: out of memory is `RankOutOfMemory`, a lost rank (closed connection,
    timeout) one clear `DistributedError` naming the request and the group's `timeout` (default: the training
    group's, collective_timeout); any other error is raised unchanged."""
    try:
        with named_out_of_memory(what, micro_batch_size):
            yield
    except RuntimeError as err:
        if isinstance(err, DistributedError) or not is_lost_rank(err):
            raise
        rank, world = _place()
        seconds = GROUP.timeout if timeout is None else timeout
        raise DistributedError(
            f"rank {rank} of {world}: another training process stopped or did not answer within "
            f"{seconds:.0f}s during {what} ({_first_line(err)}); the run stops here, no checkpoint is written "
            "for this step, resume from the last complete one with --resume"
        ) from err


def all_reduce_sum(values: list[float]) -> list[float]:
    """Element-wise sums over the training group's ranks, reduced in float64 on the group's device."""
    tensor = torch.tensor(values, dtype=torch.float64, device=GROUP.device)
    with collective("metric reduction"):
        dist.all_reduce(tensor)
    return tensor.tolist()


def all_reduce_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` summed over the training group's ranks (on the group's device), returned where it was."""
    shared = tensor.to(GROUP.device)
    with collective("sharing rows"):
        dist.all_reduce(shared)
    return shared.to(tensor.device)
