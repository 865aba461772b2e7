"""How settings are layered and how a bad one is reported: one rule for the CLI's `--config` + flags
(`flows/options.py`) and for a study's arms over its base training settings (`rlep.tasks.settings.study`). Settings
of an earlier layout are read in today's (`rlep.tasks.settings.migrate`) before they are layered."""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel, ValidationError

from rlep.tasks.settings.migrate import in_current_layout, own_settings, section_migration
from rlep.tasks.settings.sections import field_type, kind_has_flag, section_types, settings_by_kind


def merge_settings(base: dict[str, Any], update: dict[str, Any], model: Any = None) -> dict[str, Any]:
    """`base` with `update` merged in (a new dict); `model` is the config class (or union of them) both are
    settings of. Nested sections merge key by key.

    A section of several variants (a union discriminated by `kind`: replay, the loss objective, a problem source) that
    `update` switches to another variant is replaced by the update's instead, keeping only the base's settings every
    variant has (the migration's rule for settings of another variant, `rlep.tasks.settings.migrate.own_settings`): the
    old variant's own settings do not apply to the new one (replay rlep -> fifo keeps nothing; a problem source switched
    from tiny-math to a file keeps its split and limit, so the evaluation's `test` split and 200 problems hold for a
    file too). An update without `kind` is of the variant the section's migration names from the merged settings (a
    problem source's from its `source`; a backend's from its kind and `nproc`, `--nproc 2` over one process being
    fsdp2), else of the base's; a problem source's section is then left without `kind`, which validation names again
    (`upgrade_source_settings`, which also reads a saved dump of an earlier layout).

    Both are first read in today's layout (`in_current_layout`): an arm written the old way (`max_tokens: 8`)
    over a base of today's (`sampling: {max_tokens: 24, ...}`) sets the base's `sampling.max_tokens`."""
    base, update = in_current_layout(model, base), in_current_layout(model, update)
    variants = section_types(model)
    if len(variants) > 1:
        migrate = section_migration(model)
        if migrate is not None:  # a base of an earlier layout (a study's base settings from a YAML) names its kind
            base = migrate(base)
        old = base.get("kind")
        if migrate is not None and "kind" not in update:
            # named again from the merged settings: a kind its settings name (a problem source's), or a kind of
            # its own (a backend's) that lacks a setting the update gives (`nproc` over one process)
            own = settings_by_kind(model).get(old, set())
            if not kind_has_flag(model) or not set(update) <= own:
                base = {key: value for key, value in base.items() if key != "kind"}
            new = migrate({**base, **update}).get("kind")
        else:
            new = update.get("kind", old)
        if new != old:
            shared = set.intersection(*(set(v.model_fields) for v in variants)) - {"kind"}
            return copy.deepcopy(own_settings(base, shared)) | copy.deepcopy(update)
        variants = [v for v in variants if "kind" in v.model_fields and v.model_fields["kind"].default == new]
    section = variants[0] if len(variants) == 1 else None
    merged = copy.deepcopy(base)
    for key, value in update.items():
        current = merged.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            merged[key] = _merge_section(current, value, field_type(section, key))
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _merge_section(current: dict[str, Any], value: dict[str, Any], annotation: Any) -> dict[str, Any]:
    """A nested section: merged by the section's own type, or, where the type is unknown (a mapping of free
    names), key by key unless its `kind` changes."""
    if annotation is not None and section_types(annotation):
        return merge_settings(current, value, annotation)
    if value.get("kind", current.get("kind")) != current.get("kind"):
        return copy.deepcopy(value)
    return merge_settings(current, value)


def refused_choices(
    node: Any,
    given: dict[str, Any],
    defaults: dict[str, Any] | None = None,
    path: tuple[str, ...] = (),
    explicit: dict[str, Any] | None = None,
) -> list[str]:
    """Settings a user chose (`given`, nested like the config) that the validated section `node` cannot
    honour, which validation cannot tell because it depends on whether a value was chosen: a file source's
    split when the file has no split column (`FileSource.refused_choices`). A value equal to a default is no
    choice of the user's (a saved run's config, `rlep show-config` output): the default the section had where
    it was merged (`defaults`, nested) or its field's. Settings in `explicit` (nested like `given`: flags typed
    on a command line) are choices whatever their value: `--split train` for a file without a split column is
    refused though `train` is the default."""
    if not isinstance(node, BaseModel):
        return []
    defaults = defaults if isinstance(defaults, dict) else {}
    explicit = explicit if isinstance(explicit, dict) else {}
    field_defaults = {
        name: field.get_default(call_default_factory=True)
        for name, field in type(node).model_fields.items()
        if not field.is_required()
    }

    def chosen(name: str, value: Any) -> bool:
        if name in explicit and not isinstance(explicit[name], dict):
            return True
        return not any(name in known and known[name] == value for known in (defaults, field_defaults))

    check = getattr(node, "refused_choices", None)
    names = {name for name, value in given.items() if chosen(name, value)}
    refused = [".".join((*path, why)) for why in check(names)] if check else []
    for name, value in given.items():
        if isinstance(value, dict):
            refused += refused_choices(
                getattr(node, name, None), value, defaults.get(name), (*path, name), explicit.get(name)
            )
    return refused


def booleans_for_numbers(node: Any, given: Any, path: tuple[str, ...] = ()) -> list[str]:
    """Settings given `true` or `false` (`given`, nested like the validated `node`) where a number goes: pydantic's
    lax mode reads them as 1 and 0 (`steps: true` would train one step, `seeds: [true]` seed 1), so they are named
    instead. A setting that takes a boolean or a number keeps the boolean, and is not named."""
    if isinstance(given, bool):
        if isinstance(node, (int, float)) and not isinstance(node, bool):
            return [f"{'.'.join(path) or '(top level)'}: a number, not {str(given).lower()}"]
        return []
    if isinstance(given, dict) and isinstance(node, (BaseModel, dict)):
        found = []
        for name, value in given.items():
            inner = node.get(name) if isinstance(node, dict) else getattr(node, str(name), None)
            found += booleans_for_numbers(inner, value, (*path, str(name)))
        return found
    if isinstance(given, list) and isinstance(node, (list, tuple)) and len(given) == len(node):
        return [
            problem
            for i, (inner, value) in enumerate(zip(node, given))
            for problem in booleans_for_numbers(inner, value, (*path[:-1], f"{path[-1] if path else ''}[{i}]"))
        ]
    return []


def validation_problems(err: ValidationError, prefix: str = "", model: Any = None) -> list[str]:
    """One line per problem of `err`: the setting's dotted path (under `prefix`), the message, the value given.
    With the `model` validated, a path through a union of kinds drops the kind pydantic puts in it, and a setting
    the chosen kind lacks says so and names the kinds that have it (pydantic's own words were `replay.fifo.pool:
    Extra inputs are not permitted`); one value where a section goes shows the section as a mapping."""
    lines = []
    for e in err.errors():
        path, kind, kinds_with, annotation = (
            _walk_loc(model, e["loc"]) if model is not None else (e["loc"], None, [], None)
        )
        field = ".".join(str(p) for p in (*([prefix] if prefix else []), *path)) or "(top level)"
        got = e.get("input")
        shown = "" if e["type"] == "missing" or isinstance(got, dict) else f" (got {got!r})"
        sections = section_types(annotation) if annotation is not None else []
        if e["type"] == "extra_forbidden" and kind is not None:
            others = f"; the kinds that have it: {', '.join(kinds_with)}" if kinds_with else ""
            hint = others or _spelled_alike(model, e["loc"])
            lines.append(f"{field}: not a setting of kind {kind!r}{shown}{hint}")
        elif e["type"] == "extra_forbidden":  # pydantic's "Extra inputs are not permitted"
            lines.append(f"{field}: not a setting{shown}{_spelled_alike(model, e['loc'])}")
        elif e["type"] in ("model_type", "model_attributes_type") and sections and got is None:
            lines.append(f"{field}: an empty section (are all its lines commented out?): remove it, or write `{{}}`")
        elif e["type"] in ("model_type", "model_attributes_type") and sections and not isinstance(got, dict):
            lines.append(f"{field}: a section of settings, not one value{shown}: {_as_mapping(path, sections, got)}")
        else:
            message = e["msg"].removeprefix("Value error, ")  # our validators' own words, without pydantic's label
            if not path and e["type"] == "value_error":  # a check across settings: its words name them
                lines.append(message if not prefix else f"{prefix}: {message}")
            else:
                lines.append(f"{field}: {message}{shown}")
    return lines


def _spelled_alike(model: Any, loc: tuple) -> str:
    """'; did you mean X?' naming the settings spelled nearly like `loc`'s last part: those of its section, and of
    that section's own sections (`tempreature` at the top of training settings: `sampling.temperature`)."""
    import difflib

    if model is None or not loc or not isinstance(loc[-1], str):
        return ""
    parent = _walk_loc(model, loc[:-1])[3]
    dotted: dict[str, list[str]] = {}  # a setting's own name -> its names as written here
    for section in section_types(parent) if parent is not None else []:
        for name in section.model_fields:
            dotted.setdefault(name, []).append(name)
            for inner in section_types(field_type(section, name)):
                for leaf in inner.model_fields:
                    dotted.setdefault(leaf, []).append(f"{name}.{leaf}")
    close = difflib.get_close_matches(loc[-1], list(dotted), n=2, cutoff=0.75)
    names = list(dict.fromkeys(full for leaf in close for full in dotted[leaf]))
    return f"; did you mean {' or '.join(names)}?" if names else ""


def _as_mapping(path: list, sections: list[type[BaseModel]], got: Any) -> str:
    """How the section at `path` is written: by the setting that names its kind (a problem source's `source`,
    else `kind`), with the value given when it is one, else by its first setting."""
    name = path[-1] if path else "section"
    if len(sections) > 1:
        key = "source" if all("source" in s.model_fields for s in sections) else "kind"
        value = got if isinstance(got, str | int | float) else "..."  # `replay: [rlep]`: not `{kind: ['rlep']}`
        return f"write it as a mapping, e.g. `{name}: {{{key}: {value}}}`"
    first = next(iter(sections[0].model_fields), "...")
    return f"write it as a mapping of its settings, e.g. `{name}: {{{first}: ...}}`"


def _walk_loc(model: Any, loc: tuple) -> tuple[list, Any, list[str], Any]:
    """`loc` without the kinds of the unions it passes through; the kind whose own setting the last part is, if
    any; when that setting is one the kind lacks, the kinds of that union that have it; the annotation `loc` ends
    at (None where the walk loses it)."""
    path: list = []
    kind, kinds_with, union, annotation = None, [], {}, model
    for part in loc:
        by_kind = settings_by_kind(annotation) if annotation is not None else {}
        if len(by_kind) > 1 and part in by_kind:  # pydantic names the variant it validated against
            kind, union = part, by_kind
            annotation = next(v for v in section_types(annotation) if v.model_fields["kind"].default == part)
            continue
        path.append(part)
        if not union:  # deeper than the kind's own settings: the kind no longer describes where the part is
            kind = None
        kinds_with = [k for k, names in union.items() if part in names]
        union = {}
        classes = section_types(annotation) if annotation is not None else []
        annotation = field_type(classes[0], part) if len(classes) == 1 and isinstance(part, str) else None
    return path, kind, kinds_with, annotation


def format_validation_error(err: ValidationError, origin: str = "", model: Any = None) -> str:
    """`err` as one line: `ORIGIN: invalid configuration: path: message (got value); ...` (`model`: the one
    validated, as for `validation_problems`)."""
    where = f"{origin}: " if origin else ""
    return where + "invalid configuration: " + "; ".join(validation_problems(err, model=model))
