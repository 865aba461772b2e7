"""Weight sync: the policy's weights reach the generation engine streamed, in the engine's dtype, never whole.

After each update the step hands the engine `backend.named_weights(engine.weight_dtype)`, a lazy stream of
(HF name, whole tensor) pairs: one process yields its parameters (converted one at a time where the engine's
dtype differs; the parameter itself where it does not), FSDP2 gathers one parameter at a time
(`DTensor.full_tensor()`, a collective every rank runs in the same order; the stream is then `GatheredWeights`, and
its reader must not wait on a generation between two tensors). The consumer takes it tensor by tensor:

- the in-process engine passes the stream to vLLM's `reload_weights` as its `weights_iterator` (vLLM stages
  a decoder layer until all of its weights have come, then processes it) or copies each tensor into the
  transformers model's parameter;
- the generator process of async mode receives it over its socket in buckets of at most `bucket_bytes`
  (`send_weights` / `receive_weights`): a header naming each tensor's dtype, shape and offset, then the raw
  bytes, each tensor copied into the bucket's buffer as it comes and read into one buffer on the other side,
  whose views the engine loads before the next bucket is read.

So the extra host memory of a sync is one converted tensor in process (none when the dtypes agree) and, across the
pipe, two buckets on the trainer's side (the one being filled, the one being written) and one on the generator's
plus vLLM's own per-layer staging; never the whole model. A tensor larger than a bucket travels alone (Qwen2.5-7B's
embedding, 1 GiB in bf16). Measured for SmolLM2-135M: `python -m rlep.tasks.bench.sync` (docs/async.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from multiprocessing.connection import Connection

import torch

Named = Iterable[tuple[str, torch.Tensor]]

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


def send_weights(send, named: Named, bucket_bytes: int) -> int:
    """Send `named` as bucket messages, `send(("weights_bucket", header, size), payload)` per bucket: each tensor is
    copied (moved to the CPU, in its dtype) into the open bucket's byte buffer as it comes, at an aligned offset,
    and the header names each tensor's (name, dtype, shape, offset). A bucket holds at most `bucket_bytes` unless
    one tensor is larger (it then travels alone). `send` returns once the next bucket may be filled (a bounded
    queue, or the socket itself). So the sender holds one tensor, the bucket it fills and what `send` keeps.
    Returns the largest payload sent, in bytes."""
    header: list[tuple] = []
    payload: torch.Tensor | None = None
    used = largest = 0
    for name, tensor in named:
        size, start = nbytes(tensor), _aligned(used)
        if payload is not None and start + size > payload.numel():
            send(("weights_bucket", header, used), payload[:used])
            largest, header, payload, start = max(largest, used), [], None, 0
        if payload is None:  # pages are touched (resident) only as tensors are copied in
            payload = torch.empty(max(bucket_bytes, size), dtype=torch.uint8)
        payload[start : start + size].view(tensor.dtype).view(tensor.shape).copy_(tensor)
        header.append((name, str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape), start))
        used = start + size
        del tensor
    if header:
        send(("weights_bucket", header, used), payload[:used])
        largest = max(largest, used)
    return largest


def unpack(header: list[tuple], payload: bytearray | torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """The (name, tensor) pairs of a bucket: views of `payload`, no copy."""
    flat = payload if isinstance(payload, torch.Tensor) else torch.frombuffer(payload, dtype=torch.uint8)
    out = []
    for name, dtype, shape, start in header:
        dtype = getattr(torch, dtype)
        size = torch.Size(shape).numel() * dtype.itemsize
        out.append((name, flat[start : start + size].view(dtype).view(shape)))
    return out


def write_bucket(conn: Connection, message: tuple, payload: torch.Tensor) -> None:
    """One bucket on a `multiprocessing` connection: the header pickled, then the payload's bytes unpickled."""
    conn.send(message)
    conn.send_bytes(payload.numpy())


def receive_weights(conn: Connection) -> Iterator[tuple[str, torch.Tensor]]:
    """The generator process's side: (name, tensor) pairs read bucket by bucket until ("weights_end",). Each
    bucket is read into one fresh buffer whose views are yielded; the next is read once they have been taken."""
    while True:
        message = conn.recv()
        if message[0] == "weights_end":
            return
        if message[0] != "weights_bucket":
            raise ValueError(f"generator: expected a weights bucket, got {message[0]!r}")
        _, header, size = message
        buffer = bytearray(size)
        conn.recv_bytes_into(buffer)
        yield from unpack(header, buffer)
        del buffer
