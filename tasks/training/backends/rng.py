"""This process's random streams (python, numpy, torch and CUDA's): seeded at the start of a run, saved in each
checkpoint and restored on resume, by every rank for itself."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def seed_process(seed: int) -> None:
    """Seed this process's random streams (python, numpy, torch)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def process_rng_state() -> dict[str, Any]:
    """This process's random streams (python, numpy, torch and, with GPUs, CUDA's: dropout draws from them)."""
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def set_process_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():  # restored per device present
        for device, rng in enumerate(state["cuda"][: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(rng, device)
