"""Sharded training state: each rank writes its own shards of the policy and of the AdamW state with
torch.distributed.checkpoint (DCP), and any world size reads them back (DCP reshards on load).

A checkpoint of a torch.distributed run (`OUT/checkpoints/step-N/`) holds

    config.json, model.safetensors, tokenizer   the HF model (gathered on rank 0; the optimizer never is):
                                                what `rlep eval`, `rlep collect` and vLLM read, as before
    sharded/.metadata, sharded/__R_0.distcp     rank R's shards of the float32 weights and AdamW moments
    trainer_state.pt                            rank 0's counters, scheduler, RNG streams, replay state

A resumed run takes its weights from `sharded/` (the float32 masters), not from the HF files, so resume is
exact at the same world size, and at another one up to the order of the ranks' gradient sums. One process
(`LocalBackend`) writes today's format (the whole optimizer in trainer_state.pt) and reads a sharded one too,
so a run trained on N ranks can go on in one process. Every rank writes into the same directory: on several
nodes it must be on storage every node sees (as the run directory already must be).
"""

from __future__ import annotations

from pathlib import Path

import torch

SHARDED_DIR = "sharded"  # inside a checkpoint: DCP's files
SHARDED_FORMAT = "dcp"  # trainer_state.pt's "format" for a checkpoint whose model and optimizer are in SHARDED_DIR


def save_sharded(directory: Path | str, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Path:
    """Every rank: write this rank's shards of `model` (HF names) and `optimizer` (keyed by parameter name)
    under `directory`/sharded. Nothing is gathered: FSDP2 ranks write their local shards, DDP's replicated
    tensors are written once (DCP deduplicates them over the ranks)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    path = Path(directory) / SHARDED_DIR
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=path, no_dist=_one_process())
    return path


def load_sharded(directory: Path | str, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Every rank (or one process without a process group): read `model`'s and `optimizer`'s state from
    `directory` (a checkpoint's sharded/), resharded to this world size."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)  # the layout to read into: this world's
    state = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, checkpoint_id=Path(directory), no_dist=_one_process())
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


def _one_process() -> bool:
    """No process group: one process reads or writes every shard itself."""
    return not torch.distributed.is_initialized()
