"""Which tracker a training run also writes its metrics for, and the check that its package is installed, made
when the settings are validated (`TrainConfig.tracker`), before anything runs. The trackers themselves are
tasks/training/loop/tracking.py's."""

from __future__ import annotations

import importlib.util
from typing import Literal

Tracker = Literal["none", "tensorboard", "mlflow"]


class TrackerUnavailable(ValueError):
    """The chosen tracker's package is not installed."""


def check_tracker(kind: Tracker) -> None:
    """Raise `TrackerUnavailable` (one line) when `kind` needs a package that is not installed."""
    package = {"tensorboard": "tensorboard", "mlflow": "mlflow"}.get(kind)
    if package and importlib.util.find_spec(package) is None:
        raise TrackerUnavailable(f"tracker {kind}: the `{package}` package is not installed (pip install {package})")
