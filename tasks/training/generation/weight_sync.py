"""Weight sync: the policy's weights reach the generation engine streamed, in the engine's dtype, never whole.

After each update the step hands the engine `backend.named_weights(engine.weight_dtype)`, a lazy stream of
(HF name, whole tensor) pairs: one process yields its parameters (converted one at a time where the engine's
dtype differs; the parameter itself where it does not), FSDP2 gathers one parameter at a time
(`DTensor.full_tensor()`, a collective every rank runs in the same order; the stream is then `GatheredWeights`, and
its reader must not wait on a generation between two tensors). The consumer takes it tensor by tensor:

- the in-process engine passes the stream to vLLM's `reload_weights` as its `weights_iterator` (vLLM stages
  a decoder layer until all of its weights have come, then processes it) or copies each tensor into the
  transformers model's parameter;
- the generator processes of async mode receive it through one bucket-sized buffer they share with the trainer
  (tasks/training/generation/weight_transport.py: shared memory on the CPU, CUDA IPC on a shared GPU), reused for every
  bucket (`send_weights` / `receive_weights`): the trainer copies a bucket's tensors into the buffer and sends
  each generator only the bucket's header (each tensor's name, dtype, shape and offset); every generator loads
  the tensors as views of the buffer, at the same time, and acknowledges; the next bucket is written once all
  have. No tensor byte is pickled or goes through a socket.

So the extra host memory of a sync is one converted tensor in process (none when the dtypes agree) and, across
processes, the one shared bucket on each side (both map the same pages) plus vLLM's own per-layer staging; never
the whole model. A tensor larger than a bucket crosses in bucket-sized pieces, assembled on the generator's side in
a tensor of its own (Qwen2.5-7B's embedding, 1 GiB in bf16). Measured: `rlep bench sync` (docs/async.md).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator

import torch

from rlep.tasks.training.generation.weight_transport import bucket_read

Named = Iterable[tuple[str, torch.Tensor]]
# One tensor, or one piece of a tensor larger than a bucket, in a bucket: (name, dtype, shape, offset in the bucket,
# offset of the piece in the tensor's bytes, bytes of the piece).
Entry = tuple[str, str, tuple[int, ...], int, int, int]

# Each tensor of a bucket starts at a multiple of this many bytes, so its view of the buffer is aligned for any
# dtype (and for vectorised copies).
ALIGN = 64


def named_weights(module: torch.nn.Module, dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
    """`module`'s state dict, one whole tensor at a time, in `dtype`, under the HF names. A tied weight goes under
    both names, as `state_dict()` gives them: vLLM 0.32's in-place reload left the tied model wrong (greedy answers
    no longer the trainer's) when `lm_head.weight` was left out. A DTensor (an FSDP2 shard) is gathered first: a
    collective, so every rank must run the same iteration. Nothing is copied where the dtype is already `dtype`."""
    for name, value in module.state_dict().items():
        value = value.full_tensor() if hasattr(value, "full_tensor") else value
        yield name, value.detach().to(dtype)


class GatheredWeights(Iterator[tuple[str, torch.Tensor]]):
    """A `named_weights` stream whose every tensor is gathered by a collective of the training ranks (FSDP2): while
    its reader holds a tensor, the other ranks wait inside the next gather, bounded by `collective_timeout`. So the
    reader must not wait on anything else between two tensors; a generator process is first waited for until it has
    answered every request sent before (`AnsweredLater.push_weights`), outside any collective."""

    def __init__(self, stream: Iterator[tuple[str, torch.Tensor]]) -> None:
        self.stream = stream

    def __next__(self) -> tuple[str, torch.Tensor]:
        return next(self.stream)


def nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


def _bytes_of(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as a flat uint8 view (a contiguous copy only where it is not contiguous)."""
    flat = tensor.detach().reshape(-1)
    return flat.view(torch.uint8) if flat.numel() else torch.empty(0, dtype=torch.uint8, device=tensor.device)


def send_weights(
    named: Named,
    buffer: torch.Tensor,
    publish: Callable[[list[Entry]], None],
    reusable: Callable[[], None],
    bucket_bytes: int | None = None,
) -> int:
    """Copy `named` into the byte tensor `buffer`, one bucket of at most `bucket_bytes` (default: the buffer's size)
    at a time, each tensor at an aligned offset, and `publish(header)` each filled bucket: its entries (`Entry`) are
    all a reader needs. `reusable()` is called before the first write into the buffer of every bucket and returns once
    every reader is done with the one before. A tensor larger than a bucket goes alone, in bucket-sized pieces, one
    bucket each. So the sender holds one tensor and the buffer. Returns the number of buckets published."""
    limit = min(bucket_bytes or buffer.numel(), buffer.numel())
    header: list[Entry] = []
    used = buckets = 0
    for name, tensor in named:
        size, start = nbytes(tensor), _aligned(used)
        dtype, shape, flat = str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape), _bytes_of(tensor)
        del tensor
        if header and start + size > limit:
            publish(header)
            header, used, start, buckets = [], 0, 0, buckets + 1
        if size <= limit:
            if not header:
                reusable()
            buffer[start : start + size].copy_(flat)
            header.append((name, dtype, shape, start, 0, size))
            used = start + size
            continue
        for first in range(0, size, limit):  # larger than a bucket: pieces, one bucket each
            piece = min(limit, size - first)
            reusable()
            buffer[:piece].copy_(flat[first : first + piece])
            publish([(name, dtype, shape, 0, first, piece)])
            buckets += 1
    if header:
        publish(header)
        buckets += 1
    return buckets


def _storage_uses(buffer: torch.Tensor) -> int | None:
    """How many tensors refer to `buffer`'s storage (torch's private count; None where this torch has none)."""
    count = getattr(torch._C, "_storage_Use_Count", None)
    return count(buffer.untyped_storage()._cdata) if count else None


def _tensor_at(buffer: torch.Tensor, offset: int, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    """A tensor on `buffer`'s memory at byte `offset` (aligned), made on the storage itself rather than as a view of
    `buffer`: a view would keep its base alive, and with it the buffer, after `set_` has moved it elsewhere."""
    return torch.empty(0, dtype=dtype, device=buffer.device).set_(
        buffer.untyped_storage(), offset // dtype.itemsize, shape
    )


def receive_weights(
    recv: Callable[[], tuple], buffer: torch.Tensor, acknowledge: Callable[[], None]
) -> Iterator[tuple[str, torch.Tensor]]:
    """The generator process's side: (name, tensor) pairs, read bucket by bucket from the shared byte tensor `buffer`
    as `recv()` announces them, until ("weights_end",). A tensor is yielded as a view of the buffer (no copy); one
    that came in pieces is assembled in a tensor of its own first. Once the consumer asks for the tensor after a
    bucket's last, the bucket is `acknowledge`d and the trainer may overwrite it: a tensor of it the consumer still
    holds (vLLM stages a layer until all its weights are in; a loop variable) is first moved to memory of its own
    (`Tensor.set_` on a copy: the consumer's tensor keeps its values, no longer in the buffer). Any other view of the
    buffer left alive (one the consumer derived) would change under it: that raises rather than loads wrong weights."""
    message = recv()
    # The buffer's own uses, counted once the first bucket is announced: its writer has let go of the buffer by then
    # (a writer on a thread of this process, as in the tests, holds a view of it while it copies)
    alone = _storage_uses(buffer)
    assembled: torch.Tensor | None = None
    while message[0] != "weights_end":
        if message[0] != "weights_bucket":
            raise ValueError(f"generator: expected a weights bucket, got {message[0]!r}")
        given = []
        for name, dtype, shape, offset, first, size in message[1]:
            dtype = getattr(torch, dtype)
            whole = torch.Size(shape).numel() * dtype.itemsize
            if first == 0 and size == whole:
                tensor = _tensor_at(buffer, offset, dtype, shape)
                given.append(weakref.ref(tensor))
                yield name, tensor
                del tensor
                continue
            if first == 0:
                assembled = torch.empty(whole, dtype=torch.uint8, device=buffer.device)
            assembled[first : first + size].copy_(buffer[offset : offset + size])
            if first + size == whole:
                tensor, assembled = assembled.view(dtype).view(shape), None
                yield name, tensor
                del tensor
        for ref in given:
            if (held := ref()) is not None:
                held.set_(held.clone())
            del held
        if alone is not None and _storage_uses(buffer) != alone:
            raise RuntimeError(
                "generator: the engine kept a view of the shared weights bucket that cannot be moved out of it; "
                "loading on would change its weights under it"
            )
        bucket_read(buffer)
        acknowledge()
        message = recv()
