"""Settings written in an earlier layout, read as today's: the one migration step of rlep's settings.

Collection, training and evaluation settings are written out and read back later: a YAML in flows/configs, a
training run's train_config.json, a collection's manifest, a flow run's parameters in Prefect's database, a run
pickled for the process that carries it out. Their models derive from `SavedSettings`, whose validation (and
unpickling) reads them through `upgrade_settings` first; `tasks.settings.merge_settings` and
`flows.options.build_config` upgrade each side before merging, so a YAML of an earlier layout and today's flags,
or a study's base settings and an arm written the old way, meet in one layout. The layout changes, oldest first:

1. The loss objective became a section of its kind (2026-11-25): `loss: {objective: asymre, asymre_delta_v: -0.1,
   clip_low: 0.2, clip_high: 0.28, dual_clip: 10.0}` named the kind and held both objectives' settings beside it.
   Each setting moves into the objective it belongs to, `{kind: asymre, delta_v: -0.1}`; the other objective's,
   which never acted, are dropped. No `objective` meant ppo-clip, the default.
2. One sampling section (2026-11-26): `temperature`, `top_p` and `max_tokens` were top-level settings of
   collection, training and (study) evaluation settings; they move into `sampling:`.

A setting given in both layouts at once (`max_tokens` and `sampling.max_tokens`) is refused, naming both: which of
the two was meant cannot be told. Problem sources have their own migration, run where a source is validated
(`rlep.data.source_config.upgrade_source_settings`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, model_validator

# 2: the settings that moved into `sampling:`.
SAMPLING_KEYS = ("temperature", "top_p", "max_tokens")
# 1: the loss settings that sat beside `objective`, by the kind of objective they belong to, and their new names.
_OBJECTIVE_KEYS = {
    "ppo-clip": {"clip_low": "clip_low", "clip_high": "clip_high", "dual_clip": "dual_clip"},
    "asymre": {"asymre_delta_v": "delta_v"},
}
_EVERY_OBJECTIVE_KEY = {key for keys in _OBJECTIVE_KEYS.values() for key in keys}


def upgrade_settings(settings: Any) -> Any:
    """Settings of a collection, a training or an evaluation (a mapping, nested like the config) in today's layout:
    the changes in this module's docstring applied, in order. Anything else, today's layout included, is returned
    as it is. Raises ValueError for a setting given in both layouts."""
    if not isinstance(settings, dict):
        return settings
    if isinstance(settings.get("loss"), dict):
        settings = {**settings, "loss": _objective_as_section(settings["loss"])}
    return _sampling_as_section(settings)


def _objective_as_section(loss: dict[str, Any]) -> dict[str, Any]:
    objective = loss.get("objective")
    flat = {key: value for key, value in loss.items() if key in _EVERY_OBJECTIVE_KEY}
    if not flat and not isinstance(objective, str):
        return loss
    objective = {"kind": objective} if isinstance(objective, str) else objective
    if objective is None:
        objective = {}
    if not isinstance(objective, dict):  # a model instance beside flat settings: validation names them
        return loss
    kind = objective.get("kind", "ppo-clip")
    owned = _OBJECTIVE_KEYS.get(kind, {})
    moved = {owned[key]: value for key, value in flat.items() if key in owned}
    _refuse_both(moved, objective, "loss.", "loss.objective.")
    rest = {key: value for key, value in loss.items() if key not in flat}
    return {**rest, "objective": {**objective, "kind": kind, **moved}}


def _sampling_as_section(settings: dict[str, Any]) -> dict[str, Any]:
    flat = {key: settings[key] for key in SAMPLING_KEYS if key in settings}
    if not flat:
        return settings
    section = settings.get("sampling")
    if isinstance(section, BaseModel):  # as built in Python: the settings it was given
        section = section.model_dump(include=section.model_fields_set)
    section = {} if section is None else section
    if not isinstance(section, dict):
        return settings  # not settings at all: validation says so
    _refuse_both(flat, section, "", "sampling.")
    rest = {key: value for key, value in settings.items() if key not in flat}
    return {**rest, "sampling": {**section, **flat}}


def _refuse_both(moved: dict[str, Any], section: dict[str, Any], old: str, new: str) -> None:
    both = [key for key in moved if key in section]
    if both:
        named = ", ".join(f"{old}{key} and {new}{key}" for key in both)
        raise ValueError(f"{named} both given (an earlier layout and today's): give only {new}{both[0]}")


class SavedSettings(BaseModel):
    """Base of the settings models that earlier versions wrote out: validation reads an earlier layout first
    (`upgrade_settings`), and so does unpickling, for a run handed to a process that imports a newer rlep than
    the one that pickled it (a study or `rlep serve` started before an upgrade spawns each run's process)."""

    @model_validator(mode="before")
    @classmethod
    def _upgraded(cls, settings: Any) -> Any:
        return upgrade_settings(settings)

    def __setstate__(self, state: dict[Any, Any]) -> None:
        fields = state.get("__dict__", {})
        if set(fields) != set(type(self).model_fields):
            given = {name: v.model_dump() if isinstance(v, BaseModel) else v for name, v in fields.items()}
            state = type(self).model_validate(given).__getstate__()
        super().__setstate__(state)
