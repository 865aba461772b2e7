"""Training backends by kind: what builds a run's backend and what starts the processes it needs, in one table that
both the build (`make_backend`, in the loop) and the launch (`trainer.train`) read.

A run's kind is its backend settings' `kind` (`kind_of`; rlep.tasks.settings.backend: `one-process`, `ddp`, `fsdp2`, one
settings model each). A kind is a `BackendKind`: `build(spec)` returns the backend the loop trains through (one
process's, or rank 0's of a group already started), and `launch(config, resume)`, where the kind needs processes of its
own, starts them and returns rank 0's result (None: the loop runs in this process). The built-in kinds are named by
import path and loaded when first used, so this table imports neither torch nor the backends; a new backend is one
`register_backend` call (a test registers a toy one without touching this package).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BackendKind:
    build: Callable[[Any], Any]  # PolicySpec -> TrainingBackend
    launch: Callable[[Any, bool], Any] | None = None  # (TrainConfig, resume) -> TrainResult; None: in this process


def _lazy(path: str) -> Callable[..., Any]:
    """`module:attribute`, imported when first called."""
    module, names = path.split(":")

    def call(*args: Any, **kwargs: Any) -> Any:
        target = importlib.import_module(module)
        for name in names.split("."):
            target = getattr(target, name)
        return target(*args, **kwargs)

    call.__qualname__ = path
    return call


_DISTRIBUTED = BackendKind(
    build=_lazy("rlep.tasks.training.backends.distributed:DistributedBackend.lead"),
    launch=_lazy("rlep.tasks.training.backends.launch:train_distributed"),
)
BACKENDS: dict[str, BackendKind] = {
    "one-process": BackendKind(build=_lazy("rlep.tasks.training.backends.backend:LocalBackend")),
    "ddp": _DISTRIBUTED,
    "fsdp2": _DISTRIBUTED,
}


def register_backend(name: str, build: Callable[[Any], Any], launch: Callable[[Any, bool], Any] | None = None) -> None:
    """Make `name` a backend kind (replacing one of that name)."""
    BACKENDS[name] = BackendKind(build, launch)


def kind_name(settings: Any) -> str:
    """The kind a run's backend settings (`BackendConfig`) ask for."""
    return settings.kind


def kind_of(settings: Any) -> BackendKind:
    name = kind_name(settings)
    if name not in BACKENDS:
        raise ValueError(f"backend kind {name!r}: none registered (known: {', '.join(sorted(BACKENDS))})")
    return BACKENDS[name]
