"""A distributed rank's model, built on the meta device, sharded, then loaded once from rank 0.

Before, every rank built the whole float32 model on its CPU (and rank 0 moved it whole to its device) before
DDP or FSDP2 took it. Now (torchtitan's order, and what transformers does for FSDP's "cpu ram efficient
loading"):

1. every rank builds the model on `torch.device("meta")`: shapes only, no memory, nothing read but config.json;
2. `shard` places it (FSDP2: `fully_shard` on meta parameters; DDP: nothing yet), and `to_empty` allocates
   this rank's part on its device: its shards under FSDP2, a full copy under DDP;
3. the non-persistent buffers (the rotary embedding's `inv_freq`, in no checkpoint) are computed again by the
   model's own `_init_weights`;
4. rank 0 alone reads the weights (the safetensors files, or random weights drawn from `init_seed` for a
   policy given as a config) into one float32 state dict on its CPU, and `set_model_state_dict(...,
   broadcast_from_rank0=True)` sends each tensor to the ranks, each keeping its shard. The other ranks open
   no weight file.

Tied embeddings stay tied: the model is built tied, `to_empty` and the load keep one parameter under both
names (checked in tests/tasks/training/test_distributed.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist


def model_config(weights: Any):
    """The HF config of `weights` (a directory or hub name: config.json only; or a config itself)."""
    if not isinstance(weights, str):
        return weights
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(weights)


def read_full_state_dict(weights: Any, dtype: torch.dtype, init_seed: int = 0) -> dict[str, torch.Tensor]:
    """Rank 0: the whole model's tensors under their HF names in `dtype`, on the CPU: read from the safetensors
    files of `weights` (a directory or a hub name), or drawn from `init_seed` when `weights` is a config."""
    if not isinstance(weights, str):
        from transformers import AutoModelForCausalLM

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(init_seed)
            return AutoModelForCausalLM.from_config(weights, dtype=dtype).state_dict()
    from safetensors.torch import load_file

    directory = Path(weights)
    if not directory.is_dir():  # a hub name: its files in the local cache (downloaded once, by rank 0)
        from huggingface_hub import snapshot_download

        directory = Path(snapshot_download(weights, allow_patterns=["*.safetensors", "*.json"]))
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{directory}: no *.safetensors file to load the policy from")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update({name: value.to(dtype) for name, value in load_file(file).items()})
    return state


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
    reader: Callable[..., dict[str, torch.Tensor]] = read_full_state_dict,
) -> torch.nn.Module:
    """The model of `weights` built on the meta device, placed by `shard` (in place), allocated on `device`
    and loaded from rank 0's copy (`reader`, called on rank 0 only); in eval mode."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
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
    full = _with_tied_names(reader(weights, dtype, init_seed), model) if dist.get_rank() == 0 else {}
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_model_state_dict(model, full, options=options)
    return model.eval()
