"""Launching torch.distributed training: `rlep train --nproc N` as N processes on this node (torchrun
--standalone) or as Ray actors (tasks/training/backends/ray_launch.py), and each rank's entry point (`main`): rank 0
trains in its own process (tasks.training.loop.steps.train_in_process) through the DistributedBackend, the others serve
its requests (tasks/training/backends/distributed.py).

Run one rank by hand: `python -m rlep.tasks.training.backends.launch --config launch_config.json [--resume]` under
torchrun (`train_distributed` writes that file into the run directory and starts every rank).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING

# torch and the backends are imported where they are used: run as a rank's __main__, this module imports nothing
# that registers an exit handler before `run_then_exit` does (tasks/quick_exit.py).
if TYPE_CHECKING:
    from rlep.tasks.training.loop.steps import TrainResult


def launch(module: str, arguments: list[str], nproc: int) -> None:
    """Run `python -m module arguments` as `nproc` processes on this node (torchrun --standalone)."""
    from rlep.tasks.runner import module_env
    from rlep.tasks.training.backends.collectives import DistributedError

    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        module,
        *arguments,
    ]
    done = subprocess.run(command, env=module_env(OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1")))
    if done.returncode != 0:
        raise DistributedError(
            f"{module} on {nproc} processes failed (exit status {done.returncode}); the error is above"
        )


def train_distributed(config, resume: bool = False) -> TrainResult:
    """A whole run (`tasks.training.trainer.train`) on `config.backend.nproc` processes (torchrun on this node, or Ray
    actors: `backend.launcher`); returns rank 0's TrainResult."""
    from rlep.data.fs import write_text_atomic
    from rlep.data.run_layout import TrainRunLayout
    from rlep.tasks.training.backends.checkpoint import latest_checkpoint
    from rlep.tasks.training.backends.ray_launch import launch_on_ray
    from rlep.tasks.training.loop.steps import TrainResult

    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    request = TrainRunLayout(out).launch_request
    write_text_atomic(request, config.model_dump_json(indent=2))
    arguments = ["--config", str(request), *(["--resume"] if resume else [])]
    if config.backend.launcher == "ray":
        launch_on_ray(main, arguments, config.backend)
    else:
        launch("rlep.tasks.training.backends.launch", arguments, config.backend.nproc)
    layout = TrainRunLayout(out)
    return TrainResult(out, config.steps, latest_checkpoint(out), layout.metrics, layout.eval)


def main(argv: list[str] | None = None) -> None:
    """One rank of `rlep train --nproc N`: rank 0 trains (`train_in_process`), the others serve."""
    parser = argparse.ArgumentParser(prog="python -m rlep.tasks.training.backends.launch")
    parser.add_argument("--config", type=Path, required=True, help="TrainConfig as JSON.")
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args(argv)
    from rlep.tasks.settings.train import TrainConfig
    from rlep.tasks.training.backends.collectives import DistributedError
    from rlep.tasks.training.backends.distributed import init_distributed, serve, shutdown, stop_serving
    from rlep.tasks.training.loop.steps import train_in_process

    config = TrainConfig.model_validate_json(args.config.read_text())
    rank = init_distributed(config.backend)
    try:
        if rank == 0:
            try:
                train_in_process(config, resume=args.resume, progress=True)
            except BaseException:
                with suppress(DistributedError):  # a lost rank: the error that matters is train's
                    stop_serving()
                raise
            stop_serving()
        else:
            serve()
    finally:
        shutdown()


# The group's state lives in tasks/training/backends/collectives.py, so running this module as __main__ is safe.
if __name__ == "__main__":
    from rlep.tasks.quick_exit import run_then_exit

    sys.exit(run_then_exit(main))
