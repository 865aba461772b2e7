"""One source of settings: pydantic models, filled from a YAML file and then from command-line flags.

`add_model_flags` turns every leaf field of a config model into a flag (`--temperature`, `--split`, ...):
the leaf's own name when it is unique in the model, else `--parent-leaf`; a field may name its flag with
`json_schema_extra={"cli_flag": ...}`. Help text is the field's description. `build_config` merges
YAML < flags and validates once, so a bad value gets one message naming its field, wherever it came from.
"""

from __future__ import annotations

import argparse
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from rlep.tasks.settings import format_validation_error, merge_settings

M = TypeVar("M", bound=BaseModel)
_DEST_PREFIX = "cfg:"


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the file and/or field."""


def _model_types(annotation: Any) -> list[type[BaseModel]]:
    """The BaseModel classes an annotation holds: one for `X` or `X | None`, several for a union of variants."""
    candidates = [annotation]
    if get_origin(annotation) in (typing.Union, types.UnionType):
        candidates = [a for a in get_args(annotation) if a is not type(None)]
    return [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]


def _leaves(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any, list | None]]:
    """(path, field, choices) for every leaf setting. The variants of a union (e.g. replay kinds) share one
    set of flags: a field name seen in several variants is one flag, and `Literal` choices are merged."""
    for name, field in model.model_fields.items():
        nested = _model_types(field.annotation)
        if len(nested) == 1:
            yield from _leaves(nested[0], (*prefix, name))
        elif nested:
            merged: dict[str, tuple[Any, list | None]] = {}
            for variant in nested:
                for leaf, leaf_field in variant.model_fields.items():
                    choices = _literal_choices(leaf_field.annotation)
                    if leaf in merged:
                        if choices and merged[leaf][1] is not None:
                            merged[leaf][1].extend(c for c in choices if c not in merged[leaf][1])
                        continue
                    merged[leaf] = (leaf_field, list(choices) if choices else None)
            for leaf, (leaf_field, choices) in merged.items():
                yield (*prefix, name, leaf), leaf_field, choices
        else:
            yield (*prefix, name), field, _literal_choices(field.annotation)


def _flag_names(model: type[BaseModel]) -> dict[tuple[str, ...], tuple[str, Any, list | None]]:
    """Flag per leaf: its `cli_flag` or own name when unique in `model`; when not, prefixed by its parents
    (`--eval-problems-limit`; a named flag keeps its name after the grandparent: `--collect-engine`)."""
    leaves = list(_leaves(model))

    def short(path: tuple[str, ...], field: Any) -> str:
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        return extra.get("cli_flag") or path[-1]

    counts: dict[str, int] = {}
    for path, field, _ in leaves:
        counts[short(path, field)] = counts.get(short(path, field), 0) + 1
    names = {}
    for path, field, choices in leaves:
        name = short(path, field)
        if counts[name] > 1:
            name = "-".join([*path[:-2], name]) if name != path[-1] else "-".join(path)
        names[path] = ("--" + name.replace("_", "-"), field, choices)
    if len({flag for flag, _, _ in names.values()}) < len(names):  # still ambiguous: full paths
        names = {
            path: ("--" + "-".join(path).replace("_", "-"), field, choices)
            for path, (_, field, choices) in names.items()
        }
    return names


def _is_list(annotation: Any) -> bool:
    return get_origin(annotation) in (list, tuple)


def _literal_choices(annotation: Any) -> list[Any] | None:
    if get_origin(annotation) is Literal:
        return list(get_args(annotation))
    return None


def add_model_flags(parser: argparse.ArgumentParser, model: type[BaseModel], skip: set[str] = frozenset()) -> None:
    """Add one flag per leaf field of `model` (flags named in `skip` are left to the caller)."""
    group = parser.add_argument_group(f"{model.__name__} settings (also settable in --config YAML)")
    defaults = model()  # what `rlep show-config` prints: a section's factory may set its own defaults
    for path, (flag, field, choices) in _flag_names(model).items():
        if flag in skip:
            continue
        default = _effective_default(defaults, path, field)
        help_text = f"{field.description or ''} [default: {default!r}]".replace("%", "%%")
        kwargs: dict[str, Any] = {
            "dest": _DEST_PREFIX + ".".join(path),
            "default": argparse.SUPPRESS,
            "help": help_text,
        }
        if field.annotation is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif _is_list(field.annotation):
            kwargs["nargs"] = "*"
            kwargs["metavar"] = "VALUE"
            item = (get_args(field.annotation) or (str,))[0]
            item_choices = _literal_choices(item)
            if item_choices:  # e.g. `--levels 1 2`: argparse checks and converts each value
                kwargs["choices"], kwargs["type"] = item_choices, type(item_choices[0])
                kwargs["metavar"] = "{" + ",".join(map(str, item_choices)) + "}"
            elif item in (int, float):
                kwargs["type"] = item
        elif choices:
            kwargs["choices"] = choices
            kwargs["type"] = type(choices[0])
            kwargs["metavar"] = "{" + ",".join(map(str, choices)) + "}"
        else:
            kwargs["metavar"] = path[-1].upper()
            if _allows_none(field.annotation):
                kwargs["type"] = _none_or_text
        group.add_argument(flag, **kwargs)


def _effective_default(config: BaseModel, path: tuple[str, ...], field: Any) -> Any:
    """The value a leaf has when nothing is given: read from the default config (a setting of a
    variant the default does not choose falls back to its field's default)."""
    node: Any = config
    for name in path[:-1]:
        node = getattr(node, name, None)
    if isinstance(node, BaseModel) and path[-1] in type(node).model_fields:
        return getattr(node, path[-1])
    return field.get_default(call_default_factory=True)


def _allows_none(annotation: Any) -> bool:
    return get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in get_args(annotation)


def _none_or_text(text: str) -> str | None:
    """`--dual-clip none` (or null) switches an optional setting off."""
    return None if text.strip().lower() in ("none", "null") else text


def flag_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The values given on the command line, as {"dotted.path": value}."""
    return {k[len(_DEST_PREFIX) :]: v for k, v in vars(args).items() if k.startswith(_DEST_PREFIX)}


def read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: unreadable config file ({err})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML ({err})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of settings, got {type(data).__name__}")
    return data


def _set_path(data: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for name in parents:
        child = data.get(name)
        if not isinstance(child, dict):
            child = {} if child is None else child
            data[name] = child
        data = child
    data[leaf] = value


def build_config(model: type[M], config_file: Path | None = None, overrides: dict[str, Any] | None = None) -> M:
    """`model` validated from YAML `config_file` (if any) with `overrides` ({"a.b": value}) on top."""
    # The user's settings (YAML, then flags) are merged onto the model's defaults, so a partial nested
    # section keeps the defaults of its siblings, including nested defaults that differ from the nested
    # class's own.
    user: dict[str, Any] = read_yaml(config_file) if config_file else {}
    for path, value in (overrides or {}).items():
        _set_path(user, path, value)
    try:
        data = model().model_dump()
    except ValidationError:  # a model with required fields: nothing to start from
        data = {}
    data = merge_settings(data, user)
    origin = f"{config_file}: " if config_file else ""
    try:
        config = model.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, str(config_file) if config_file else "")) from None
    refused = _settings_not_applying(config, user)
    if refused:
        raise ConfigError(origin + "invalid configuration: " + "; ".join(refused))
    return config


def _settings_not_applying(node: Any, given: dict[str, Any], path: tuple[str, ...] = ()) -> list[str]:
    """Settings the user gave that the validated section has no use for (e.g. tiny-math's `families` for a
    file source): a section says which through its `settings_not_applying(names)` method."""
    if not isinstance(node, BaseModel):
        return []
    check = getattr(node, "settings_not_applying", None)
    try:  # a value equal to its default is no choice of the user's (a saved run's config, `rlep show-config` output)
        defaults = type(node)().model_dump(mode="json")
    except ValidationError:
        defaults = {}
    chosen = {name for name, value in given.items() if name not in defaults or value != defaults[name]}
    refused = [".".join((*path, why)) for why in check(chosen)] if check else []
    for name, value in given.items():
        if isinstance(value, dict):
            refused += _settings_not_applying(getattr(node, name, None), value, (*path, name))
    return refused


def dump_yaml(config: BaseModel) -> str:
    """The full configuration as YAML (every field, defaults included): a starting point for --config."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
