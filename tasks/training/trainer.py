"""`rlep train` and `flows.train`'s entry point: a whole GRPO run with experience replay, in this process or on
`backend.nproc` torch.distributed ranks.

`train` runs the loop here (tasks/training/loop.py: the step's phases and how the algorithm departs from its
papers) or, with `backend.nproc` > 1, launches the ranks (tasks/training/launch.py), whose rank 0 runs that same
loop and whose others follow its requests (tasks/training/distributed.py).

Run: `rlep train --steps 40`, `rlep train --replay rlep --pool runs/collect`, `rlep train --nproc 2 --mode async`,
`rlep train --resume runs/train`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch.distributed

from rlep.tasks.training.config import TrainConfig
from rlep.tasks.training.launch import train_distributed
from rlep.tasks.training.loop import TrainResult, train_in_process


def train(
    config: TrainConfig,
    resume: bool = False,
    progress: bool = True,
    on_step: Callable[[dict, list[dict] | None], None] | None = None,
) -> TrainResult:
    """A whole run: train (or resume) to `config.steps`, then draw OUT/learning_curve.png. With `backend.nproc` > 1
    it launches torchrun (or Ray actors), whose rank 0 trains in its own process (`on_step` is not called then;
    docs/distributed.md)."""
    if config.backend.nproc > 1 and not torch.distributed.is_initialized():
        return train_distributed(config, resume)
    return train_in_process(config, resume, progress, on_step)
