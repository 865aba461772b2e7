"""How settings are layered and how a bad one is reported: one rule for the CLI's `--config` + flags
(`flows/options.py`) and for a study's arms over its base training settings (`tasks/study/config.py`)."""

from __future__ import annotations

import copy
from typing import Any

from pydantic import ValidationError


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
