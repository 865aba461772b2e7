"""One engine per process and model: Prefect tasks hand each other a model path and engine settings, and
the engine they name is started once and reused (starting vLLM costs seconds; its memory is large)."""

from __future__ import annotations

import threading

from rlep.tasks.engines import GenerationEngine, make_engine
from rlep.tasks.settings.engine import EngineConfig

_ENGINES: dict[tuple[str, str], GenerationEngine] = {}
_LOCK = threading.Lock()


def shared_engine(model: str, config: EngineConfig) -> GenerationEngine:
    """The process's engine for (`model`, `config`), started on first use. Any other engine is closed first:
    on one machine, two resident engines would compete for the same memory."""
    key = (str(model), config.model_dump_json())
    with _LOCK:
        if key not in _ENGINES:
            release_engines_locked()
            _ENGINES[key] = make_engine(model, config)
        return _ENGINES[key]


def release_engines() -> None:
    """Close every cached engine (end of a flow, or before training starts its own)."""
    with _LOCK:
        release_engines_locked()


def release_engines_locked() -> None:
    for engine in _ENGINES.values():
        engine.close()
    _ENGINES.clear()
