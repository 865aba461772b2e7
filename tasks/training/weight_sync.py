"""Weight sync: the policy's weights reach the generation engine streamed, in the engine's dtype, never whole.

After each update the step hands the engine `backend.named_weights(engine.weight_dtype)`, a lazy stream of
(HF name, whole tensor) pairs: one process yields its parameters (converted one at a time where the engine's
dtype differs; the parameter itself where it does not), FSDP2 gathers one parameter at a time
(`DTensor.full_tensor()`, a collective every rank runs in the same order). The consumer takes it tensor by tensor:

- the in-process engine passes the stream to vLLM's `reload_weights` as its `weights_iterator` (vLLM stages
  a decoder layer until all of its weights have come, then processes it) or copies each tensor into the
  transformers model's parameter;
- the generator process of async mode receives it over its socket in buckets of at most `bucket_bytes`
  (`send_weights` / `receive_weights`): a header naming each tensor's dtype, shape and offset, then the raw
  bytes, written straight from the converted tensors into one buffer and read into one buffer on the other
  side, whose views the engine loads before the next bucket is read.

So the extra host memory of a sync is one tensor in process (none when the dtypes agree) and about two buckets
per side across the pipe (the one being packed or read, the one vLLM may still hold for an unfinished
layer), never the whole model; a tensor larger than a bucket travels alone (Qwen2.5-7B's embedding, 1.1 GB in
bf16). Today's measurement: `python -m rlep.tasks.bench.sync` (docs/async.md).
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


def nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


def buckets(named: Named, bucket_bytes: int) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """`named` cut into consecutive lists whose packed size (`pack`) is at most `bucket_bytes`; a tensor larger
    than that is a bucket of its own. Lazy: the next tensor is asked for only when the current bucket is open."""
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, tensor in named:
        end = _aligned(size) + nbytes(tensor)
        if bucket and end > bucket_bytes:
            yield bucket
            bucket, end = [], nbytes(tensor)
        bucket.append((name, tensor))
        size = end
    if bucket:
        yield bucket


def pack(bucket: list[tuple[str, torch.Tensor]]) -> tuple[list[tuple], torch.Tensor]:
    """(header, payload): one CPU byte buffer holding the bucket's tensors, each at an aligned offset, and per
    tensor (name, dtype, shape, offset). Each tensor is copied into its place (moved to the CPU on the way)."""
    header, offset = [], 0
    for name, tensor in bucket:
        offset = _aligned(offset)
        header.append((name, str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape), offset))
        offset += nbytes(tensor)
    payload = torch.empty(offset, dtype=torch.uint8)
    for (_, tensor), (_, _, _, start) in zip(bucket, header):
        view = payload[start : start + nbytes(tensor)].view(tensor.dtype).view(tensor.shape)
        view.copy_(tensor)
    return header, payload


def unpack(header: list[tuple], payload: bytearray | torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """The (name, tensor) pairs of a packed bucket: views of `payload`, no copy."""
    flat = payload if isinstance(payload, torch.Tensor) else torch.frombuffer(payload, dtype=torch.uint8)
    out = []
    for name, dtype, shape, start in header:
        dtype = getattr(torch, dtype)
        size = torch.Size(shape).numel() * dtype.itemsize
        out.append((name, flat[start : start + size].view(dtype).view(shape)))
    return out


def send_weights(send, named: Named, bucket_bytes: int) -> int:
    """Send `named` as bucket messages: `send(("weights_bucket", header, size), payload)` per bucket. `send` puts
    a bucket on its way and returns once it may build the next (a bounded queue, or the socket itself).
    Returns the largest payload sent, in bytes."""
    largest = 0
    for bucket in buckets(named, bucket_bytes):
        header, payload = pack(bucket)
        del bucket
        largest = max(largest, payload.numel())
        send(("weights_bucket", header, payload.numel()), payload)
    return largest


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
