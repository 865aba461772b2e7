"""A versioned digest of resolved settings: what decides whether a finished run can be reused.

Settings are resolved (read in today's layout through `rlep.tasks.settings.migrate` and validated by their model,
so that a FIFO batch given by `replay_ratio` is rounded as training rounds it), dumped canonically (JSON with sorted
keys and no spaces; a path as text) and hashed with DIGEST_VERSION inside the hashed text. A run saved in an
earlier layout, written as a YAML or built in Python thus has the digest of the same settings today. A record
keeps the version beside the digest (`digest_record`); a record of another version, or of none (written before
digests were versioned), is not taken for other settings: `same_digest` says it cannot tell, and the run's saved
settings are compared instead (`same_settings`). Bump DIGEST_VERSION when what is hashed changes meaning (the
canonical form, the parts a run hashes): digests of two versions never compare equal.

No torch and no device. `precision: auto` is digested as `auto`: what it became on the machine that trained is
recorded beside the settings (OUT/resolved_settings.json) and is no part of which training was asked for. A run
saved before `auto` existed (2026-11-26) holds a concrete precision, and is the same training as an `auto` run
where `auto` picks that precision; that one question needs the device, so `same_settings` asks it of such a run
alone, through the `auto_precision` its caller gives (the executor, which knows the update's device), and without
one counts the run as other settings.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from rlep.tasks.settings.backend import BackendSettings

# 2: backend settings became one model per kind (2026-11-27), so the same training dumps other JSON
DIGEST_VERSION = 2

M = TypeVar("M", bound=BaseModel)


def resolved(model: type[M], settings: M | Mapping[str, Any] | str | bytes) -> M:
    """`settings` as today's `model`: a mapping, or JSON text (a saved train_config.json), read through the
    migration and validated; an instance of `model` as it is (it was validated when built). Raises pydantic's
    ValidationError for settings that are not valid today."""
    if isinstance(settings, model):
        return settings
    if isinstance(settings, (str, bytes)):
        return model.model_validate_json(settings)
    return model.model_validate(settings)


def canonical(part: Any, exclude: Any = None) -> str:
    """One part of a digest as canonical JSON: a settings model's JSON dump (`exclude`: settings left out, as
    pydantic's `model_dump` takes them), or plain JSON data as it is; None (a part a run does not have) as `null`."""
    data = part.model_dump(mode="json", exclude=exclude) if isinstance(part, BaseModel) else part
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def settings_digest(*parts: Any, exclude: Any = None) -> str:
    """The digest (16 hex characters) of `parts`, in order: resolved settings models (`resolved`) and plain JSON
    data beside them (a living pool's re-collection period), None for one a run does not have (an evaluation).
    `exclude` applies to every settings model among them."""
    text = "\n".join([f"rlep settings digest v{DIGEST_VERSION}", *(canonical(part, exclude) for part in parts)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def digest_record(*parts: Any) -> dict[str, Any]:
    """What a finished run's record keeps of its settings: the digest of `parts` and the version beside it."""
    return {"settings": settings_digest(*parts), "settings_digest_version": DIGEST_VERSION}


def same_digest(record: Mapping[str, Any], *parts: Any) -> bool | None:
    """Whether `record` (a finished run's) holds the digest of `parts`; None when it holds a digest of another
    version, or none of a version (written before), which cannot tell: compare the run's saved settings."""
    if record.get("settings_digest_version") != DIGEST_VERSION:
        return None
    return record.get("settings") == settings_digest(*parts)


def same_settings(
    model: type[M],
    saved: M | Mapping[str, Any] | str | bytes,
    requested: M | Mapping[str, Any],
    exclude: Any = None,
    auto_precision: Callable[[], str] | None = None,
) -> bool:
    """Whether the settings a run saved (`saved`: a mapping or JSON text, read through the migration) are the
    settings `requested`, those in `exclude` aside: their digests are equal. Saved settings that are not valid
    today are other settings.

    A saved concrete `backend.precision` against a requested `auto` (a run saved before `auto` existed) reads as
    `auto` when `auto_precision()`, the precision `auto` picks for `requested` on this machine, is that one; it
    is called for such a run only. Without it, such a run is other settings."""
    try:
        before = resolved(model, saved)
    except ValidationError:
        return False
    wanted = resolved(model, requested)
    before = _as_auto(before, wanted, auto_precision)
    return settings_digest(before, exclude=exclude) == settings_digest(wanted, exclude=exclude)


def _as_auto(saved: M, requested: M, auto_precision: Callable[[], str] | None) -> M:
    """`saved` with its concrete precision read as `auto`, where `requested` asks for `auto` and `auto` picks it."""
    backend, wanted = getattr(saved, "backend", None), getattr(requested, "backend", None)
    if not (isinstance(backend, BackendSettings) and isinstance(wanted, BackendSettings)):
        return saved
    if wanted.precision != "auto" or backend.precision == "auto" or auto_precision is None:
        return saved
    if auto_precision() != backend.precision:
        return saved
    return saved.model_copy(update={"backend": backend.model_copy(update={"precision": "auto"})})
