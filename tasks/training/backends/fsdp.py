"""FSDP2 over a decoder-only HF model, and what `precision: bf16` means for every strategy.

`fully_shard` goes on each decoder layer, then on the root (embeddings, final norm, head), so a rank holds
1/N of every weight, gradient and AdamW moment, and gathers one layer's weights at a time for its forward and
backward.

One bf16 meaning (one process, DDP and FSDP2 alike): the forward, and so the backward, runs under bf16
autocast over float32 master weights; gradients are float32, so are their reductions (DDP's all-reduce,
FSDP2's reduce-scatter) and the AdamW state. Under it FSDP2 and DDP on the same ranks agree to float32 reduction
noise; the price: FSDP2 all-gathers float32 weights, one layer at a time.

FSDP2's own `MixedPrecisionPolicy(param_dtype=bfloat16)` is the option `backend.fsdp_param_dtype: bfloat16`: it
gathers bf16 weights (half the traffic and the gathered layer's memory), but then the embedding's output and so the
whole residual stream are bf16, where autocast keeps them float32 and rounds only matmul inputs; its updates drift
from one process's and DDP's by about as much as bf16 drifts from float32 (2.5e-2 of the weight change after 12
AdamW steps; the drift on the fixture model is measured in tests/tasks/training/test_distributed.py and stated in
docs/distributed.md). Reductions stay float32 either way.
"""

from __future__ import annotations

import torch

from rlep.tasks.training.backends.collectives import DistributedError


def autocast_bf16(model: torch.nn.Module, device: torch.device) -> None:
    """Run `model`'s forward (and so its backward) under bf16 autocast; the weights stay as they are."""
    model.forward = torch.autocast(device_type=device.type, dtype=torch.bfloat16)(model.forward)


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None:
        raise DistributedError(
            f"fsdp2: {type(model).__name__} has no .model.layers to shard (a decoder-only HF model is needed)"
        )
    return layers


def shard_fsdp2(model: torch.nn.Module, forward_only: bool = False, param_dtype: str = "float32") -> None:
    """Shard each decoder layer, then the root over all ranks, in place; gathers in `param_dtype` (`float32`: the
    weights' own dtype; `bfloat16`: `backend.fsdp_param_dtype`), float32 gradient reductions (bf16 compute otherwise
    comes from autocast, `autocast_bf16`).

    FSDP2 keeps the root's parameters (embedding, final norm, head: the largest tensors of a small model) gathered
    after a forward, for the backward that follows. A model that only runs forward (the KL reference) has no
    backward to reshard them, so it kept them whole on every rank after its first forward: `forward_only`
    reshards the root after each forward too."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    gathered = None if param_dtype == "float32" else getattr(torch, param_dtype)
    policy = MixedPrecisionPolicy(param_dtype=gathered, reduce_dtype=torch.float32)
    for layer in decoder_layers(model):
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy, reshard_after_forward=True if forward_only else None)
