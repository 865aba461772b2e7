"""How a weights bucket crosses from the trainer into generator processes: one buffer both sides map, reused for
every bucket; only small metadata (names, dtypes, shapes, offsets) travels over the processes' channel.

Two kinds, chosen from the placement alone (`choose_transport`):

- `shared-memory` (the CPU, and a generator on GPUs of its own): an anonymous shared-memory file
  (`os.memfd_create`, Linux) of one bucket's size, handed to the generator process as a file descriptor when it
  starts and mapped by both. It has no name in /dev/shm, so it cannot outlive the processes that map it: a normal
  exit, an error or a SIGKILL of either side frees it with the last mapping (it shows as `memfd:rlep-weights` in
  /proc/PID/maps while mapped). Each side's host memory for the sync is that one mapping, whose pages both
  processes count in their resident set.
- `cuda-ipc` (the trainer updates on a GPU the generator shares: `update_device` is `cuda` and no `generator_gpus`): a
  bucket-sized byte tensor on that GPU, opened by the generator through a CUDA IPC handle
  (`torch.multiprocessing.reductions.reduce_tensor`, sent once over the channel). No host memory at all: the weights
  go device to device. Run on one H200 (2026-11-29, docs/async.md: its test, and async runs of the GPU check's tiny
  policy). Written to the CUDA IPC rules as torch documents them (the trainer keeps the buffer alive for the
  generator's lifetime; the trainer's stream is synchronised before a bucket is announced, the generator's before it
  acknowledges one). A generator on GPUs of its own uses `shared-memory` (device -> shared host buffer -> its
  device); CUDA IPC across devices (peer access) is not implemented.

The protocol on top (tasks/training/generation/weight_sync.py: `send_weights` / `receive_weights`): the trainer waits
until every generator has acknowledged the previous bucket, copies the next one into the buffer, announces its header to
every generator at once, and the generators read it in parallel."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Literal

import torch

TransportKind = Literal["shared-memory", "cuda-ipc"]
MEMFD_NAME = "rlep-weights"  # what /proc/PID/maps shows for the mapping: memfd:rlep-weights (deleted)


def choose_transport(generator_gpus: Sequence[int], update_device: str) -> TransportKind:
    """`cuda-ipc` where the update runs on a GPU and the generator shares it (no `generator_gpus`: both on the default
    GPU); `shared-memory` everywhere else (the CPU; a generator on GPUs of its own)."""
    return "cuda-ipc" if update_device.startswith("cuda") and not generator_gpus else "shared-memory"


class SharedMemoryBucket:
    """The trainer's side of a `shared-memory` bucket: `buffer`, `size` bytes of an anonymous shared file."""

    kind: TransportKind = "shared-memory"

    def __init__(self, size: int) -> None:
        self.size = size
        self.fd = os.memfd_create(MEMFD_NAME)  # close-on-exec; Popen(pass_fds=...) hands it to a generator
        try:
            os.ftruncate(self.fd, size)  # sparse: a page takes memory once written
            self.buffer = map_fd(self.fd, size)
        except BaseException:
            os.close(self.fd)
            raise

    def pass_fds(self) -> list[int]:
        """File descriptors a generator process must inherit (at the same numbers) to open the bucket."""
        return [self.fd]

    def opening(self) -> tuple:
        """What a generator process started with `pass_fds` needs to open the bucket (`open_bucket`)."""
        return ("shared-memory", self.fd, self.size)

    def written(self) -> None:
        """A bucket's bytes are in the buffer (CPU copies are synchronous: nothing to wait for)."""

    def close(self) -> None:
        """Unmap and close; the memory goes once the generators' mappings are gone too."""
        self.buffer = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class CudaIpcBucket:
    """The trainer's side of a `cuda-ipc` bucket: `buffer`, a byte tensor on `device` (run on an H200)."""

    kind: TransportKind = "cuda-ipc"

    def __init__(self, size: int, device: str | torch.device) -> None:
        self.size = size
        self.buffer = torch.empty(size, dtype=torch.uint8, device=device)

    def pass_fds(self) -> list[int]:
        return []

    def opening(self) -> tuple:
        """A CUDA IPC handle of the buffer (a few hundred bytes): torch's own tensor sharing, sent as a message."""
        from torch.multiprocessing.reductions import reduce_tensor

        rebuild, args = reduce_tensor(self.buffer)
        return ("cuda-ipc", rebuild, args)

    def written(self) -> None:
        """The copies into the buffer were queued on the trainer's stream: done before the bucket is announced."""
        torch.cuda.current_stream(self.buffer.device).synchronize()

    def close(self) -> None:
        self.buffer = None


Bucket = SharedMemoryBucket | CudaIpcBucket


def make_bucket(kind: TransportKind, size: int, device: str = "cpu") -> Bucket:
    """The trainer's bucket of `kind` (`choose_transport`), `size` bytes; `device`: the update's, for `cuda-ipc`."""
    if kind == "cuda-ipc":
        return CudaIpcBucket(size, device)
    return SharedMemoryBucket(size)


def bucket_for(generator_gpus: Sequence[int], size: int) -> Bucket:
    """The bucket of a generator placed on `generator_gpus` (none: the trainer's default GPU, or the CPU), chosen by
    `choose_transport` from the update's device as the policy places it (`placement.update_device`)."""
    from rlep.tasks.training.generation.placement import update_device

    device = update_device(generator_gpus, torch.cuda.device_count())
    return make_bucket(choose_transport(generator_gpus, device), size, device)


def map_fd(fd: int, size: int) -> torch.Tensor:
    """A byte tensor on a shared mapping of the file behind `fd` (MAP_SHARED: what one side writes, the other reads);
    the mapping lives as long as the tensor's storage."""
    return torch.from_file(f"/proc/self/fd/{fd}", shared=True, size=size, dtype=torch.uint8)


def open_bucket(opening: tuple) -> torch.Tensor:
    """The generator's side: the byte tensor of the bucket a trainer's `opening()` describes."""
    kind = opening[0]
    if kind == "shared-memory":
        _, fd, size = opening
        buffer = map_fd(fd, size)
        os.close(fd)  # the mapping keeps the file; nothing else here needs the descriptor
        return buffer
    if kind == "cuda-ipc":
        _, rebuild, args = opening
        return rebuild(*args)
    raise ValueError(f"unknown weights transport {kind!r}")


def bucket_read(buffer: torch.Tensor) -> None:
    """The generator is done reading a bucket: on a GPU, its copies out of the buffer have finished (they were queued
    on its stream) before it tells the trainer the buffer may be written again."""
    if buffer.is_cuda:
        torch.cuda.current_stream(buffer.device).synchronize()
