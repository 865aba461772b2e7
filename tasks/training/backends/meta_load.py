"""A distributed rank's model, built on the meta device, sharded, then loaded once from rank 0.

Before, every rank built the whole float32 model on its CPU (and rank 0 moved it whole to its device) before
DDP or FSDP2 took it. Now (torchtitan's order, and what transformers does for FSDP's "cpu ram efficient
loading"):

1. every rank builds the model on `torch.device("meta")`: shapes only, no memory, nothing read but config.json;
2. `shard` places it (FSDP2: `fully_shard` on meta parameters; DDP: nothing yet), and `to_empty` allocates
   this rank's part on its device: its shards under FSDP2, a full copy under DDP;
3. the non-persistent buffers (the rotary embedding's `inv_freq`, in no checkpoint) are computed again by the
   model's own `_init_weights`;
4. rank 0 alone reads the weights (the safetensors files tensor by tensor, or random weights drawn from
   `init_seed` for a policy given as a config) in chunks of at most `LOAD_CHUNK_BYTES` in the load's dtype,
   and `set_model_state_dict(..., broadcast_from_rank0=True, strict=False)` sends each chunk's tensors to the
   ranks, each keeping its shard; a name of the model that no chunk held is an error on every rank. Rank 0
   never holds the whole float32 state dict (28 GB for a 7B model): one chunk at a time. The other ranks open
   no weight file.

Tied embeddings stay tied: the model is built tied, `to_empty` and the load keep one parameter under both
names (checked in tests/tasks/training/test_distributed_checkpoint.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

# What rank 0 holds of the weights at once while loading (in the load's dtype); a larger tensor comes alone.
LOAD_CHUNK_BYTES = 512 * 2**20


def model_config(weights: Any):
    """The HF config of `weights` (a directory or hub name: config.json only; or a config itself)."""
    if not isinstance(weights, str):
        return weights
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(weights)


def read_state_dict_chunks(weights: Any, dtype: torch.dtype, init_seed: int = 0) -> Iterator[dict[str, torch.Tensor]]:
    """Rank 0: the whole model's tensors under their HF names in `dtype`, on the CPU, in chunks of at most
    `LOAD_CHUNK_BYTES`: read one tensor at a time from the safetensors files of `weights` (a directory or a hub
    name), or drawn from `init_seed` when `weights` is a config (one chunk: a config is for small test models)."""
    if not isinstance(weights, str):
        from transformers import AutoModelForCausalLM

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(init_seed)
            yield AutoModelForCausalLM.from_config(weights, dtype=dtype).state_dict()
        return
    from safetensors import safe_open

    directory = Path(weights)
    if not directory.is_dir():  # a hub name: its files in the local cache (downloaded once, by rank 0)
        from huggingface_hub import snapshot_download

        directory = Path(snapshot_download(weights, allow_patterns=["*.safetensors", "*.json"]))
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{directory}: no *.safetensors file to load the policy from")
    chunk: dict[str, torch.Tensor] = {}
    size = 0
    for file in files:
        with safe_open(str(file), framework="pt") as opened:
            for name in opened.keys():
                tensor = opened.get_tensor(name).to(dtype)
                nbytes = tensor.numel() * tensor.element_size()
                if chunk and size + nbytes > LOAD_CHUNK_BYTES:
                    yield chunk
                    chunk, size = {}, 0
                chunk[name] = tensor
                size += nbytes
    if chunk:
        yield chunk


def _with_tied_names(state: dict[str, torch.Tensor], model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """`state` with every name of a shared parameter present (a tied head is saved under one name only)."""
    names: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(param), []).append(name)
    for aliases in names.values():
        known = next((state[n] for n in aliases if n in state), None)
        if known is not None:
            state.update({n: known for n in aliases if n not in state})
    return state


def build_on_meta_and_load(
    weights: Any,
    device: torch.device,
    dtype: torch.dtype,
    shard: Callable[[torch.nn.Module], None],
    init_seed: int = 0,
    reader: Callable[..., Iterable[dict[str, torch.Tensor]]] | None = None,
    before_load: Callable[[], None] | None = None,
) -> torch.nn.Module:
    """The model of `weights` built on the meta device, placed by `shard` (in place), allocated on `device`
    and loaded from rank 0's chunks (`reader`, default `read_state_dict_chunks`, called on rank 0 only); in
    eval mode. `before_load` runs on every rank just before the loading's first collective."""
    from transformers import AutoModelForCausalLM

    config = model_config(weights)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    shard(model)
    model.to_empty(device=device)
    model.tie_weights()  # to_empty made the tied head a parameter of its own: one again
    with torch.no_grad():  # the buffers no checkpoint holds (rotary inv_freq), as transformers computes them
        for module in model.modules():
            if getattr(module, "_non_persistent_buffers_set", None):
                model._init_weights(module)
    reader = reader or read_state_dict_chunks
    if before_load is not None:
        before_load()
    _load_from_rank_0(model, reader(weights, dtype, init_seed) if dist.get_rank() == 0 else None)
    return model.eval()


def _load_from_rank_0(model: torch.nn.Module, chunks: Iterable[dict[str, torch.Tensor]] | None) -> None:
    """Broadcast rank 0's `chunks` (None on the other ranks) into every rank's part of `model`, one chunk at a
    time; a name of the model's state no chunk held is an error on every rank (rank 0 tells them which)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True, strict=False)
    rank0 = dist.get_rank() == 0
    chunks = iter(chunks) if rank0 else None
    loaded: set[str] = set()
    while True:
        chunk = next(chunks, None) if rank0 else None
        if rank0 and chunk is not None:
            chunk = _with_tied_names(chunk, model)
            loaded.update(chunk)
        message: list[Any] = [None]  # rank 0: ("chunk", None) while it has one, then ("done", the names none held)
        if rank0:
            message = [("chunk", None) if chunk is not None else ("done", sorted(set(model.state_dict()) - loaded))]
        dist.broadcast_object_list(message, src=0)
        kind, missing = message[0]
        if kind == "done":
            break
        set_model_state_dict(model, chunk if rank0 else {}, options=options)
    if missing:
        raise KeyError(f"the weights hold no value for {len(missing)} of the model's tensors: {missing[:5]}")
