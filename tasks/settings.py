"""How settings are layered and how a bad one is reported: one rule for the CLI's `--config` + flags
(`flows/options.py`) and for a study's arms over its base training settings (`tasks/study/config.py`)."""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel, ValidationError


def merge_settings(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """`base` with `update` merged in (a new dict). Nested sections merge; a section that switches variant
    (its `kind` changes, e.g. replay rlep -> fifo) replaces the old one instead: the old variant's settings do
    not apply to the new one."""
    merged = copy.deepcopy(base)
    for key, value in update.items():
        current = merged.get(key)
        if (
            isinstance(value, dict)
            and isinstance(current, dict)
            and value.get("kind", current.get("kind")) == current.get("kind")
        ):
            merged[key] = merge_settings(current, value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def settings_not_applying(
    node: Any,
    given: dict[str, Any],
    defaults: dict[str, Any] | None = None,
    path: tuple[str, ...] = (),
    explicit: dict[str, Any] | None = None,
) -> list[str]:
    """Settings a user gave (`given`, nested like the config) that the validated section `node` has no use for,
    e.g. tiny-math's `families` for a file source: a section says which through its
    `settings_not_applying(names)` method. A value equal to a default is no choice of the user's (a saved run's
    config, `rlep show-config` output, a dump made before a section became a union): the default the section
    had where it was merged (`defaults`, nested), its field's, or that of another kind of the section
    (`defaults_of_other_kinds()`). Settings in `explicit` (nested like `given`: flags typed on a command line)
    are choices whatever their value: `--split train` for a file without a split column is refused though
    `train` is the default."""
    if not isinstance(node, BaseModel):
        return []
    defaults = defaults if isinstance(defaults, dict) else {}
    explicit = explicit if isinstance(explicit, dict) else {}
    field_defaults = {
        name: field.get_default(call_default_factory=True)
        for name, field in type(node).model_fields.items()
        if not field.is_required()
    }
    other_kinds = getattr(type(node), "defaults_of_other_kinds", dict)()

    def chosen(name: str, value: Any) -> bool:
        if name in explicit and not isinstance(explicit[name], dict):
            return True
        return not any(name in known and known[name] == value for known in (defaults, field_defaults, other_kinds))

    check = getattr(node, "settings_not_applying", None)
    names = {name for name, value in given.items() if chosen(name, value)}
    refused = [".".join((*path, why)) for why in check(names)] if check else []
    for name, value in given.items():
        if isinstance(value, dict):
            refused += settings_not_applying(
                getattr(node, name, None), value, defaults.get(name), (*path, name), explicit.get(name)
            )
    return refused


def validation_problems(err: ValidationError, prefix: str = "") -> list[str]:
    """One line per problem of `err`: the setting's dotted path (under `prefix`), the message, the value given."""
    lines = []
    for e in err.errors():
        field = ".".join(str(p) for p in (*([prefix] if prefix else []), *e["loc"])) or "(top level)"
        got = e.get("input")
        shown = "" if e["type"] == "missing" or isinstance(got, dict) else f" (got {got!r})"
        lines.append(f"{field}: {e['msg']}{shown}")
    return lines


def format_validation_error(err: ValidationError, origin: str = "") -> str:
    """`err` as one line: `ORIGIN: invalid configuration: path: message (got value); ...`."""
    where = f"{origin}: " if origin else ""
    return where + "invalid configuration: " + "; ".join(validation_problems(err))
