"""Checkpoints: HF-format weights + tokenizer (loadable by transformers and vLLM) and the trainer state
(optimizer, scheduler, replay buffer, RNG streams, counters) needed to resume exactly; a torch.distributed
run's weights and optimizer are each rank's shards besides (tasks/training/backends/sharded_checkpoint.py).

`OUT/checkpoints/step-N/` appears only complete: it is written as `.step-N.{pid}.tmp` and renamed
(data.fs.atomic_dir). A resumed run first rewinds its directory to the checkpoint's step (`rewind_run`)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import torch

from rlep.data.fs import atomic_dir, write_parquet_atomic
from rlep.data.run_layout import TrainRunLayout
from rlep.tasks.training.backends.sharded_checkpoint import SHARDED_DIR, SHARDED_FORMAT

TRAINER_STATE_FILE = "trainer_state.pt"


class CheckpointError(ValueError):
    """No usable checkpoint where one is needed (e.g. `--resume` of a run that never saved), or one
    that could not be written (the message names it)."""


def checkpoint_dir(out: Path, step: int) -> Path:
    return TrainRunLayout(out).checkpoint(step)


def save_checkpoint(
    out: Path,
    step: int,
    model,
    tokenizer,
    state: dict[str, Any],
    keep: int = 2,
    weight_dtype: torch.dtype = torch.float32,
) -> Path:
    """Write `step-N` atomically and keep the `keep` newest checkpoints. `model` is a training backend; a
    distributed one writes its HF model in `weight_dtype` (the engine's) beside its float32 shards."""
    final = checkpoint_dir(out, step)
    try:
        with atomic_dir(final) as tmp:  # replaces a step a resumed run re-reaches after the kill
            model.save_pretrained(tmp, weight_dtype=weight_dtype)
            if hasattr(model, "save_state"):  # a backend's own files: a distributed one's shards (DCP)
                model.save_state(tmp)
            tokenizer.save_pretrained(tmp)
            torch.save(state, tmp / TRAINER_STATE_FILE)
    except OSError as err:  # full disk, no permission: the partial directory is already gone
        raise CheckpointError(
            f"{final}: checkpoint not written ({err.strerror or err}); nothing partial was kept, "
            "free space or fix permissions and resume with --resume"
        ) from None
    for old in list_checkpoints(out)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(out: Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    return [p for _, p in TrainRunLayout(out).step_checkpoints() if (p / TRAINER_STATE_FILE).is_file()]


def latest_checkpoint(out: Path) -> Path | None:
    checkpoints = list_checkpoints(out)
    return checkpoints[-1] if checkpoints else None


def check_fresh_out(out: Path) -> None:
    """A fresh run into `out` would remove the checkpoints an earlier run left there (`rewind_run` at step 0):
    refused, naming the ways on. (A plan's executor resumes a run that has a checkpoint, and removes a run it starts
    over itself.)"""
    last = latest_checkpoint(Path(out))
    if last is not None:
        raise CheckpointError(
            f"{out} holds a training run (its last checkpoint: {last.name}), which a fresh run would replace: "
            f"continue it with `rlep train --resume {out}`, or train into another --out (or remove {out} first)"
        )


def load_trainer_state(checkpoint: Path) -> dict[str, Any]:
    # Our own file: it holds python objects (replay buffer rollouts, RNG states), so not weights-only. Loaded
    # on the CPU: optimizer state saved on a GPU follows its parameters when loaded into the optimizer, so a run
    # resumes on another device (or GPU layout) too.
    state = torch.load(Path(checkpoint) / TRAINER_STATE_FILE, weights_only=False, map_location="cpu")
    if state.get("format") == SHARDED_FORMAT:  # the weights and optimizer are in the checkpoint's shards
        state["sharded"] = str(Path(checkpoint) / SHARDED_DIR)
    return state


def rewind_run(out: Path, step: int) -> None:
    """The run directory `out` as it was at `step` (its checkpoint's, which a resumed run goes on from): the metrics,
    evaluation rows and fresh rollouts of later steps dropped. At step 0 (a fresh run) the metrics, evaluation and
    checkpoints an earlier run left there go too."""
    layout = TrainRunLayout(out)
    for path in (layout.metrics, layout.eval):
        if path.exists():
            table = pq.read_table(path)
            if step == 0:
                path.unlink()
            else:
                keep = [i for i, s in enumerate(table.column("step").to_pylist()) if s <= step]
                write_parquet_atomic(path, table.take(keep) if keep else table.slice(0, 0))  # take([]) has no kernel
    for written, part in layout.fresh_parts():
        if written > step:
            part.unlink()
    if step == 0:
        shutil.rmtree(layout.checkpoints, ignore_errors=True)
