"""Settings written in an earlier layout, read as today's: the one migration of rlep's settings.

Collection, training and evaluation settings are written out and read back later: a YAML in flows/configs, a
training run's train_config.json, a collection's manifest, a flow run's parameters in Prefect's database, a run
pickled for the process that carries it out. Their models derive from `SavedSettings`, whose validation (and
unpickling) reads them through `upgrade_settings` first; a problem source is read through `upgrade_source_settings`
wherever it is validated (`rlep.tasks.settings.source.ProblemSourceConfig`). `in_current_layout` applies both to
every section of a model: `rlep.tasks.settings.layering.merge_settings` and `flows.options.build_config` read each
side with it before merging, so a YAML of an earlier layout and today's flags, or a study's base settings and an
arm written the old way, meet in one layout. The layout changes, oldest first:

1. The loss objective became a section of its kind (2026-11-25): `loss: {objective: asymre, asymre_delta_v: -0.1,
   clip_low: 0.2, clip_high: 0.28, dual_clip: 10.0}` named the kind and held both objectives' settings beside it.
   Each setting moves into the objective it belongs to, `{kind: asymre, delta_v: -0.1}`; the other objective's,
   which never acted, are dropped. No `objective` meant ppo-clip, the default.
2. Problem sources became one model per kind, chosen by `kind` (2026-11-26). A source without `kind` (every
   configuration and saved run before, and the command line, where `--source` names it) is of the kind its
   `source` names (`kind_of_source`: `tiny-math`, `hf:NAME`, else a file); a dump of the one model there was
   before, which holds every setting of every kind (`SOURCE_SETTINGS_BEFORE_KINDS`), keeps its kind's only.
3. One sampling section (2026-11-26): `temperature`, `top_p` and `max_tokens` were top-level settings of
   collection, training and (study) evaluation settings; they move into `sampling:`.

4. Backend settings became one model per kind, chosen by `kind` (2026-11-27): `one-process`, `ddp`, `fsdp2`. Before,
   one model held `nproc` and `strategy` (`ddp` or `fsdp2`, which acted only with `nproc` > 1) beside every kind's
   settings. Settings without `kind` (every run saved before, and `--nproc N` without `--strategy`, the flag of
   `kind`) are of kind `one-process` when `nproc` is 1 or not given, else of kind `strategy`
   (`fsdp2` when not given); `strategy` is that kind. A dump of the one model there was before, which holds every
   setting, keeps its kind's (`BACKEND_SETTINGS_BEFORE_KINDS`) and those of others it had changed, which
   validation refuses. `nproc` 1 is one process whatever the kind, as it was.

A setting given in both layouts at once (`max_tokens` and `sampling.max_tokens`) is refused, naming both: which of
the two was meant cannot be told.

One rule serves every section of several variants (the loss objective, a problem source, replay) whose settings
were written for another variant or for all of them at once: only the settings of the variant it is read as are
kept, the others never acted on it (`own_settings`). The flat loss settings of the other objective (1), a dump of
the one source model (2) and a merge that switches a section's `kind` (`merge_settings`) all go through it.

Not a layout change: `backend.precision: auto` became the default (2026-11-26). A run saved before holds the
concrete precision it trained in, which reads as it is; whether it is the same training as an `auto` run depends
on the machine (`rlep.tasks.settings.digest.same_settings`).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Iterable
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import BaseModel, BeforeValidator, model_validator

from rlep.data.source_rows import HF_PREFIX
from rlep.tasks.settings.sections import field_type, section_types
from rlep.tasks.settings.strict import SETTINGS

# 1: the loss settings that sat beside `objective`, by the kind of objective they belong to, and their new names.
_OBJECTIVE_KEYS = {
    "ppo-clip": {"clip_low": "clip_low", "clip_high": "clip_high", "dual_clip": "dual_clip"},
    "asymre": {"asymre_delta_v": "delta_v"},
}
_EVERY_OBJECTIVE_KEY = {key for keys in _OBJECTIVE_KEYS.values() for key in keys}
# 2: the settings of each kind of source in the one model before kinds (a dump held them all). Written out, not
# read from today's models: a setting a kind gains later is in no such dump.
_SHARED_SOURCE_SETTINGS = {"source", "split", "limit"}
_ROW_SOURCE_SETTINGS = {
    "layout",
    "problem_column",
    "answer_column",
    "answer_format",
    "id_column",
    "data_source_column",
    "split_column",
    "invalid_rows",
    "no_answer_values",
}
SOURCE_SETTINGS_BEFORE_KINDS = {
    "tiny-math": _SHARED_SOURCE_SETTINGS | {"seed", "tiny_math_size", "families", "levels"},
    "file": _SHARED_SOURCE_SETTINGS | _ROW_SOURCE_SETTINGS,
    "hf": _SHARED_SOURCE_SETTINGS | _ROW_SOURCE_SETTINGS | {"subset"},
}
_EVERY_SOURCE_SETTING = set().union(*SOURCE_SETTINGS_BEFORE_KINDS.values())
# 4: the backend's settings in the one model before kinds, by the kind they belong to.
_RANKS_SETTINGS = {
    "nproc",
    "launcher",
    "ray_address",
    "cpus_per_rank",
    "gpus_per_rank",
    "ray_placement_timeout",
    "collective_timeout",
    "command_timeout",
}
BACKEND_SETTINGS_BEFORE_KINDS = {
    "one-process": {"precision", "activation_checkpointing"},
    "ddp": {"precision", "activation_checkpointing"} | _RANKS_SETTINGS,
    "fsdp2": {"precision", "activation_checkpointing", "fsdp_param_dtype"} | _RANKS_SETTINGS,
}
_EVERY_BACKEND_SETTING = set().union(*BACKEND_SETTINGS_BEFORE_KINDS.values())
_BACKEND_DEFAULTS_BEFORE_KINDS = {
    "nproc": 1,
    "launcher": "torchrun",
    "ray_address": None,
    "cpus_per_rank": 1.0,
    "gpus_per_rank": "auto",
    "ray_placement_timeout": 120.0,
    "collective_timeout": 300.0,
    "command_timeout": 7200.0,
    "fsdp_param_dtype": "float32",
}
# 3: the settings that moved into `sampling:`.
SAMPLING_KEYS = ("temperature", "top_p", "max_tokens")

SourceKind = Literal["tiny-math", "file", "hf"]


def own_settings(settings: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """The settings of a section of several variants that the variant it is read as has (`names`: that variant's
    settings, or the ones every variant has); the others, written for another variant, never acted on it."""
    names = set(names)
    return {key: value for key, value in settings.items() if key in names}


def upgrade_settings(settings: Any) -> Any:
    """Settings of a collection, a training or an evaluation (a mapping, nested like the config) in today's layout:
    changes 1 and 3 of this module's docstring applied, in order (a problem source's, 2, is applied where the
    source is validated). Anything else, today's layout included, is returned as it is. Raises ValueError for a
    setting given in both layouts."""
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
    moved = {owned[key]: value for key, value in own_settings(flat, owned).items()}
    _refuse_both(moved, objective, "loss.", "loss.objective.")
    rest = {key: value for key, value in loss.items() if key not in flat}
    return {**rest, "objective": {**objective, "kind": kind, **moved}}


def kind_of_source(source: Any) -> SourceKind:
    """The kind of source `source` names: `tiny-math`, `hf` (`hf:NAME`) or `file` (anything else)."""
    if source == "tiny-math":
        return "tiny-math"
    return "hf" if isinstance(source, str) and source.startswith(HF_PREFIX) else "file"


def upgrade_source_settings(settings: Any) -> Any:
    """Problem-source settings in an earlier layout (change 2), as the current one: run by validation
    (`ProblemSourceConfig`) and by `merge_settings`.

    - No `kind` (every configuration and saved run before sources had one, e.g. a train_config.json, and the
      command line, where `--source` names it): the kind is the one `source` names, `tiny-math` when there is
      no source (its default).
    - A dump from before the kinds were separate models, which holds every setting of every kind: the settings
      of the other kinds, which its kind never read, are left out.

    Settings that give their `kind` are returned as they are; any setting of another kind there is refused."""
    if not isinstance(settings, dict) or "kind" in settings:
        return settings
    kind = kind_of_source(settings.get("source", "tiny-math"))
    if _EVERY_SOURCE_SETTING <= set(settings):
        settings = own_settings(settings, SOURCE_SETTINGS_BEFORE_KINDS[kind])
    return {"kind": kind, **settings}


def upgrade_backend_settings(settings: Any) -> Any:
    """Backend settings in an earlier layout (change 4), as the current one: run by validation (`BackendConfig`)
    and by `merge_settings`.

    - No `kind` (a train_config.json saved before kinds, a YAML, `--nproc N` without `--strategy`): kind
      `one-process` when `nproc` is 1 or not given, else `strategy` (`fsdp2` by default); `strategy` becomes the
      kind. Settings of another kind at the value they had by default there (a saved one-process run's `launcher:
      torchrun`) never acted and are left out; one set to anything else is left for validation to refuse, naming
      it (`--launcher ray` without `--nproc`).
    - Kind `ddp` or `fsdp2` with `nproc` 1: one process, as before kinds (`--resume OUT --nproc 1` over a run of
      ranks), the ranks' settings left out.

    Other settings that give their `kind` are returned as they are: a setting of another kind there is refused.
    Flags and study arms over settings of a kind name it as `rlep.tasks.settings.layering.merge_settings` says."""
    if not isinstance(settings, dict):
        return settings
    if settings.get("kind") in ("ddp", "fsdp2") and settings.get("nproc") == 1:
        # one process, as `--nproc 1` always was (`--resume OUT --nproc 1` over a run of ranks): the ranks'
        # settings do not act on it (a world of one rank is built in Python, DdpBackend(nproc=1), for tests)
        return {"kind": "one-process", **own_settings(settings, BACKEND_SETTINGS_BEFORE_KINDS["one-process"])}
    if "kind" in settings:
        return settings
    nproc = settings.get("nproc", 1)
    kind = "one-process" if nproc == 1 else settings.get("strategy", "fsdp2")
    own = BACKEND_SETTINGS_BEFORE_KINDS.get(kind, _EVERY_BACKEND_SETTING)
    idle = {
        key
        for key, value in settings.items()
        if key not in own and key in _BACKEND_DEFAULTS_BEFORE_KINDS and _BACKEND_DEFAULTS_BEFORE_KINDS[key] == value
    }
    return {"kind": kind, **{key: value for key, value in settings.items() if key not in idle | {"strategy"}}}


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

    model_config = SETTINGS

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


def section_migration(annotation: Any) -> Callable[[Any], Any] | None:
    """The migration a section's type runs before validation (a `BeforeValidator` on it: a problem source's
    `upgrade_source_settings`, which names its `kind` from `source`), or None."""
    origin = get_origin(annotation)
    if origin is Annotated:
        found = [m.func for m in annotation.__metadata__ if isinstance(m, BeforeValidator)]
        return found[0] if found else section_migration(get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return next(filter(None, (section_migration(a) for a in get_args(annotation))), None)
    return None


def in_current_layout(model: Any, settings: dict[str, Any]) -> dict[str, Any]:
    """`settings` of `model` (a config class or union) with every section of it that an earlier version may have
    written (a `SavedSettings`, at any depth: a study's `train`) upgraded to today's layout. A section that cannot
    be upgraded (a setting given in both layouts) is left as it is, for validation to refuse with its path."""
    if isinstance(model, type) and issubclass(model, SavedSettings):
        try:
            settings = upgrade_settings(settings)
        except ValueError:
            return settings
    sections = section_types(model)
    if len(sections) != 1:  # a union of variants upgrades itself where it is validated (a problem source)
        return settings
    return {
        key: in_current_layout(field_type(sections[0], key), value) if isinstance(value, dict) else value
        for key, value in settings.items()
    }
