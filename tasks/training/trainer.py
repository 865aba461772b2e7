"""`rlep train` and `flows.train`'s entry point: a whole GRPO run with experience replay, in this process or on
`backend.nproc` torch.distributed ranks.

`train` runs the loop here (tasks/training/loop/steps.py: the step's phases and how the algorithm departs from its
papers) or, where the backend's kind has processes of its own (tasks/training/backends/registry.py: `backend.nproc`
> 1), launches them (tasks/training/backends/launch.py), and their rank 0 runs that same loop while the others follow
its requests (tasks/training/backends/distributed.py).

Run: `rlep train --steps 40`, `rlep train --replay rlep --pool runs/collect`, `rlep train --nproc 2 --mode async`,
`rlep train --resume runs/train`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch.distributed

from rlep.tasks.settings.train import TrainConfig
from rlep.tasks.training.backends.checkpoint import check_fresh_out
from rlep.tasks.training.backends.registry import kind_of
from rlep.tasks.training.loop.steps import TrainResult, train_in_process


def train(
    config: TrainConfig,
    resume: bool = False,
    progress: bool = True,
    on_step: Callable[[dict, list[dict] | None], None] | None = None,
) -> TrainResult:
    """A whole run: train (or resume) to `config.steps`, then draw OUT/learning_curve.png. With `backend.nproc` > 1
    it launches torchrun (or Ray actors), whose rank 0 trains in its own process (`on_step` is not called then;
    docs/distributed.md)."""
    if not resume and not torch.distributed.is_initialized():  # a rank of a launched run was checked by its launch
        check_fresh_out(config.out)
    launch = kind_of(config.backend).launch  # processes of the backend's own, started here (not by a rank)
    if launch is not None and not torch.distributed.is_initialized():
        return launch(config, resume)
    return train_in_process(config, resume, progress, on_step)
