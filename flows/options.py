"""One source of settings: pydantic models, filled from a YAML file and then from command-line flags.

`add_model_flags` turns every leaf field of a config model into a flag (`--temperature`, `--split`, ...):
the leaf's own name when it is unique in the model, else `--parent-leaf`; a field may name its flag with
`json_schema_extra={"cli_flag": ...}`, or have none with `False` (a problem source's `kind`: `--source` names
it); `cli_flat` on a section names its settings' flags as its parent's (a config's `sampling`: `--temperature`,
`--collect-temperature` in a pipeline). Two settings of one name: a top-level one keeps the name, else the one
problem source's (a union of variants) does, so a source's flags read the same in `rlep problems`, `collect`
and `eval` (`--answer-format`; the verifier's is `--verifier-answer-format`). A spelling in RENAMED_FLAGS is
still accepted, with a note on stderr. Help text is the field's description. A command's operands and switches
come from fields too: `json_schema_extra` `cli_positional` (an operand, optional when the field has a default),
`cli_switch` (a bool set by its flag alone: `--json`; on a field that defaults to true, the flag, e.g.
`--no-schedule`, clears it), `cli_metavar`. A field without a default is a required flag unless `--config` YAML
may give it. `build_config` merges defaults < YAML (read in today's layout: `tasks.settings.migrate`) < flags
(`tasks.settings.layering.merge_settings`) and validates once, so a bad value, or a setting of another kind of section,
gets one message naming its field, wherever it came from; `build_from_flags` is the same for the settings of a
command without a file (`rlep inspect`), or a second model beside the file's.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic_core import PydanticUndefined

from rlep.data.columns import MISSING, cell
from rlep.tasks.settings.layering import (
    booleans_for_numbers,
    format_validation_error,
    merge_settings,
    refused_choices,
    validation_problems,
)
from rlep.tasks.settings.migrate import in_current_layout, section_migration
from rlep.tasks.settings.sections import field_type, kind_has_flag, section_types, settings_by_kind

M = TypeVar("M", bound=BaseModel)

# Old spelling -> the flag it became; parsed as the new one, with a note (issue 34: the README's
# `--answer-format` was `--problems-answer-format` in collect and eval, beside the verifier's answer_format).
RENAMED_FLAGS = {"--problems-answer-format": "--answer-format"}


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the file and/or field."""


# path, the path its flag is named by, field, choices, the variants it is of (empty: all or not a union), whether it
# is a union's setting
Leaf = tuple[tuple[str, ...], tuple[str, ...], Any, "list | None", tuple[str, ...], bool]


def _leaves(model: Any, prefix: tuple[str, ...] = (), named: tuple[str, ...] = ()) -> Iterator[Leaf]:
    """(path, named, field, choices, owners, in_union) for every leaf setting of `model` (a BaseModel class or a
    union). `named` is the path the flag is named by: `path` without the sections whose settings are named as
    their parent's (`cli_flat`: a config's `sampling` section, so `sampling.temperature` is `--temperature`).
    The variants of a union (e.g. replay kinds, problem sources) share one set of flags: a field name seen in
    several variants is one flag, whose `Literal` choices are merged (none if one variant takes any value);
    `owners` names the variants a setting belongs to when not all have it (empty otherwise)."""
    variants = section_types(model)
    if len(variants) > 1:
        merged: dict[str, tuple[Any, list | None]] = {}
        owners: dict[str, list[str]] = {}
        for variant in variants:
            for leaf, leaf_field in variant.model_fields.items():
                if not _has_flag(leaf_field):
                    continue
                owners.setdefault(leaf, []).append(_variant_name(variant))
                choices = _literal_choices(leaf_field.annotation)
                if leaf not in merged:
                    merged[leaf] = (leaf_field, list(choices) if choices else None)
                elif merged[leaf][1] is not None:
                    if not choices:  # e.g. a file source's `source`, free text beside tiny-math's literal
                        merged[leaf] = (merged[leaf][0], None)
                    else:
                        merged[leaf][1].extend(c for c in choices if c not in merged[leaf][1])
        for leaf, (leaf_field, choices) in merged.items():
            mine = tuple(owners[leaf]) if len(owners[leaf]) < len(variants) else ()
            yield (*prefix, leaf), (*named, leaf), leaf_field, choices, mine, True
        return
    for name, field in variants[0].model_fields.items():
        if not _has_flag(field):
            continue
        if section_types(field.annotation):
            flat = _extra(field).get("cli_flat", False)
            yield from _leaves(field.annotation, (*prefix, name), named if flat else (*named, name))
        else:
            yield (*prefix, name), (*named, name), field, _literal_choices(field.annotation), (), False


def _extra(field: Any) -> dict[str, Any]:
    return field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}


def _has_flag(field: Any) -> bool:
    return _extra(field).get("cli_flag") is not False


def _variant_name(variant: type[BaseModel]) -> str:
    """How help text names a variant of a union: its title (sources: `file source`), else its `kind` (replay:
    `rlep`)."""
    title = variant.model_config.get("title")
    if title:
        return title
    kind = variant.model_fields.get("kind")
    return kind.default if kind is not None and isinstance(kind.default, str) else variant.__name__


def _variant_help(model: Any, path: tuple[str, ...]) -> str | None:
    """For a setting that several variants of a union share with another meaning or default (`replay_ratio`:
    FIFO's replayed share of the batch, ExGRPO's rho), each variant's own description and default; None when they
    all agree (or the setting is not a union's)."""
    node: Any = model
    for name in path[:-1]:
        sections = section_types(node)
        if len(sections) != 1 or name not in sections[0].model_fields:
            return None
        node = sections[0].model_fields[name].annotation
    fields = [(_variant_name(v), v.model_fields[path[-1]]) for v in section_types(node) if path[-1] in v.model_fields]
    if any(len(_literal_choices(f.annotation) or ()) == 1 for _, f in fields):  # the union's tag (`kind`)
        return None
    said = [(name, f.description or "", f.get_default(call_default_factory=True)) for name, f in fields]
    texts = {text for _, text, _ in said}
    if len(fields) < 2 or len({(text, repr(default)) for _, text, default in said}) == 1:
        return None

    def default(value: Any) -> str:
        return "required" if value is PydanticUndefined else repr(value)

    if len(texts) == 1:  # one meaning, the variants' own defaults (a source's `source`)
        return f"{texts.pop()} [default: " + ", ".join(f"{name}: {default(d)}" for name, _, d in said) + "]"
    return " | ".join(f"{name}: {text} [default: {default(d)}]" for name, text, d in said)


def _flag_names(
    model: Any,
) -> dict[tuple[str, ...], tuple[str, Any, list | None, tuple[str, ...], tuple[str, ...]]]:
    """Flag per leaf: its `cli_flag` or own name when unique in `model`; when not, prefixed by its parents
    (`--eval-problems-limit`; a named flag keeps its name after the grandparent: `--collect-engine`), except
    that one of the leaves sharing a name keeps it: the top-level one, else the only one of a union (the
    problem source's `answer_format` beside the verifier's)."""
    leaves = list(_leaves(model))

    def short(named: tuple[str, ...], field: Any) -> str:
        return _extra(field).get("cli_flag") or named[-1]

    sharing: dict[str, list[tuple[tuple[str, ...], bool, bool]]] = {}
    for _, named, field, _, _, in_union in leaves:
        sharing.setdefault(short(named, field), []).append((named, in_union, "cli_flag" in _extra(field)))
    keeps = {}  # name -> the one path that keeps it among several
    for name, holders in sharing.items():
        top = [named for named, _, _ in holders if len(named) == 1]
        of_union = [named for named, in_union, _ in holders if in_union]
        # a setting outside the union that names its flag (a study runner's `address`: `--ray-address`) keeps it
        named_so = [named for named, in_union, flagged in holders if flagged and not in_union]
        if len(holders) > 1 and not top and len(of_union) == 1 and not named_so:
            keeps[name] = of_union[0]
    names = {}
    for path, named, field, choices, owners, _ in leaves:
        name = short(named, field)
        if len(sharing[name]) > 1 and keeps.get(name) != named:
            name = "-".join([*named[:-2], name]) if name != named[-1] else "-".join(named)
        names[path] = ("--" + name.replace("_", "-"), field, choices, owners, named)
    if len({flag for flag, *_ in names.values()}) < len(names):  # still ambiguous: full paths
        names = {
            path: ("--" + "-".join(path).replace("_", "-"), field, choices, owners, path)
            for path, (_, field, choices, owners, _) in names.items()
        }
    return names


def _title(model: Any) -> str:
    """A config's name for help text: its class name, or its variants' names for a union."""
    return model.__name__ if isinstance(model, type) else " | ".join(v.__name__ for v in section_types(model))


def _is_list(annotation: Any) -> bool:
    return get_origin(annotation) in (list, tuple)


def _literal_choices(annotation: Any) -> list[Any] | None:
    if get_origin(annotation) is Literal:
        return list(get_args(annotation))
    return None


def add_model_flags(
    parser: argparse.ArgumentParser,
    model: Any,
    skip: set[str] = frozenset(),
    *,
    only: set[str] | None = None,
    namespace: str = "cfg",
) -> None:
    """Add one flag per leaf field of `model` (flags named in `skip` are left to the caller; `only`: the dotted
    paths of the settings that get one, e.g. a study's overrides of its file; the settings in the model's
    `SET_PER_RUN`, which its command sets itself, get none). `namespace` keeps the values of a second model in the
    same parser apart (`flag_overrides(args, namespace)`): those are not read from --config."""
    set_per_run = getattr(model, "SET_PER_RUN", frozenset())
    from_file = namespace == "cfg" and "--config" in parser._option_string_actions
    group = parser.add_argument_group(f"{_title(model)} settings" + (" (also settable in --config YAML)" * from_file))
    try:  # what `rlep show-config` prints: a section's factory may set its own defaults
        defaults = TypeAdapter(model).validate_python({})
    except ValidationError:  # required settings (a command's operands): the fields' own defaults
        defaults = None
    for path, (flag, field, choices, owners, named) in _flag_names(model).items():
        if flag in skip or ".".join(path) in set_per_run or (only is not None and ".".join(path) not in only):
            continue
        extra = _extra(field)
        # a required setting of a section that is off by default (`perturb.reseed_at`), or of some variants only
        # (the ranks' `nproc` beside one process), is required only once that section or variant is chosen
        required = field.is_required() and not from_file and not owners and not _in_unset_section(defaults, path)
        default = _effective_default(defaults, path, field)
        applies = f" [only for: {', '.join(owners)}]" if owners else ""
        shown = "" if required or extra.get("cli_switch") else f" [default: {default!r}]"
        per_variant = _variant_help(model, path)  # each design's own meaning and default of a shared flag
        help_text = (per_variant or f"{field.description or ''}{applies}{shown}").replace("%", "%%")
        kwargs: dict[str, Any] = {
            "dest": f"{namespace}:" + ".".join(path),
            "default": argparse.SUPPRESS,
            "help": help_text,
        }
        if extra.get("cli_switch"):  # `--json`, `--force`; `--no-schedule` clears a setting that defaults to true
            kwargs.update(action="store_const", const=not default)
        elif field.annotation is bool:
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
        kwargs["metavar"] = extra.get("cli_metavar", kwargs.get("metavar"))
        if extra.get("cli_positional"):  # an operand: named by its dest, shown by its field's name
            dest = kwargs.pop("dest")
            kwargs["metavar"] = kwargs["metavar"] if choices else extra.get("cli_metavar", path[-1])
            if not required:  # argparse checks an omitted operand's default against its choices: the real one
                kwargs.update(nargs="?", default=default)
            group.add_argument(dest, **kwargs)
            continue
        group.add_argument(flag, **kwargs, **({"required": True} if required else {}))
        for renamed in (old for old, new in RENAMED_FLAGS.items() if new == flag):
            # the old spelling was this setting's full path; where that is still a flag (`train`'s), it stays one
            if renamed != "--" + "-".join(named).replace("_", "-") or renamed in parser._option_string_actions:
                continue
            if kwargs.get("action") is not None:
                raise TypeError(f"{renamed}: only a flag that takes a value can keep an old spelling")
            parser.add_argument(renamed, **{**kwargs, "help": argparse.SUPPRESS}, action=_RenamedFlag, new_flag=flag)


class _RenamedFlag(argparse.Action):
    """An old spelling of a flag: stores its value as the new one does, with a one-line note on stderr."""

    def __init__(self, option_strings: list[str], dest: str, new_flag: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.new_flag = new_flag

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string=None):
        print(f"note: {option_string} is renamed {self.new_flag}; the old spelling still works", file=sys.stderr)
        setattr(namespace, self.dest, values)


def _effective_default(config: BaseModel | None, path: tuple[str, ...], field: Any) -> Any:
    """The value a leaf has when nothing is given: read from the default config (a setting of a
    variant the default does not choose falls back to its field's default)."""
    node: Any = config
    for name in path[:-1]:
        node = getattr(node, name, None)
    # a setting of the default config, or what its variant answers for it (one process's `nproc`: 1)
    if isinstance(node, BaseModel) and (
        path[-1] in type(node).model_fields or isinstance(getattr(type(node), path[-1], None), property)
    ):
        return getattr(node, path[-1])
    default = field.get_default(call_default_factory=True)
    if default is PydanticUndefined and _in_unset_section(config, path):
        return None  # a required setting of a section that is off by default (`perturb.reseed_at`): off too
    return default


def _in_unset_section(defaults: BaseModel | None, path: tuple[str, ...]) -> bool:
    """Whether the setting at `path` lies in a section the defaults leave unset (None: `perturb`, `lora`)."""
    node: Any = defaults
    for name in path[:-1]:
        node = getattr(node, name, None)
        if node is None:
            return defaults is not None
    return False


def _allows_none(annotation: Any) -> bool:
    return get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in get_args(annotation)


def _none_or_text(text: str) -> str | None:
    """`--dual-clip none` (or null) switches an optional setting off."""
    return None if text.strip().lower() in ("none", "null") else text


def setting_of(dest: str, namespace: str = "cfg") -> str | None:
    """The dotted path of the setting a flag's `dest` stands for (`add_model_flags`' `namespace`); None for a flag
    of no setting."""
    prefix = f"{namespace}:"
    return dest[len(prefix) :] if dest.startswith(prefix) else None


def flag_overrides(args: argparse.Namespace, namespace: str = "cfg") -> dict[str, Any]:
    """The values given on the command line, as {"dotted.path": value} (of `add_model_flags`' `namespace`)."""
    given = ((setting_of(k, namespace), v) for k, v in vars(args).items())
    return {path: v for path, v in given if path is not None}


def build_from_flags(model: type[M], args: argparse.Namespace, namespace: str = "cfg") -> M:
    """`model` from its defaults and the flags `add_model_flags(..., namespace=namespace)` made: a command's
    settings that no --config file holds."""
    return build_config(model, None, flag_overrides(args, namespace))


class _SettingsLoader(yaml.SafeLoader):
    """PyYAML's safe loader with two of YAML 1.1's traps closed: a key given twice in one mapping is an error (PyYAML
    keeps the last one, silently), and only true/false are booleans, as in YAML 1.2 (`chat_template: on` is the
    string its setting takes; a boolean setting still reads `on`/`yes` as true, through pydantic)."""


def _mapping_once(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict:
    lines: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if isinstance(key, typing.Hashable) and key in lines:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"{key!r} is given twice (lines {lines[key]} and {key_node.start_mark.line + 1})",
                key_node.start_mark,
            )
        if isinstance(key, typing.Hashable):
            lines[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=True)


_SettingsLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_once)
_SettingsLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_SettingsLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def read_yaml(path: Path) -> dict[str, Any]:
    """A settings file's mapping (see `_SettingsLoader`); every problem with the file is one ConfigError line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: a directory, not a config file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: unreadable config file ({err})") from None
    try:
        data = yaml.load(text, Loader=_SettingsLoader)
    except yaml.YAMLError as err:  # PyYAML's text spans lines and calls the file "<unicode string>"
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        context = getattr(err, "context", None)
        raise ConfigError(f"{path}: not valid YAML{where}: {problem}" + (f" ({context})" if context else "")) from None
    if data is None:  # empty, or comments only: allowed, but said (a file whose lines are all commented out)
        print(f"note: {path} holds no settings: every setting not given by a flag is its default", file=sys.stderr)
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
    """`model` (a config class, or a union of them such as `ProblemSourceConfig`) validated once: its defaults,
    with YAML `config_file` (if any) and `overrides` ({"a.b": value}, the flags) merged on top
    (`merge_settings`: a partial section keeps the defaults of its siblings, including nested defaults that
    differ from the nested class's own; a section switched to another variant starts from the new one). A
    setting of another kind of section (tiny-math's `families` for a file) is refused by validation. A choice
    validation cannot judge (`refused_choices`: a split for a file without a split column) is refused when an
    override gives it, or the YAML gives it a value other than a default (a saved run's dump holds every
    field)."""
    # in today's layout before the flags join it: a YAML's `temperature: 0.5` and `--temperature 0.6` are one setting
    user: dict[str, Any] = in_current_layout(model, read_yaml(config_file)) if config_file else {}
    flags: dict[str, Any] = {}  # the overrides alone: choices even where they equal a default
    for path, value in (overrides or {}).items():
        _let_flags_name_the_kind(model, user, flags, path, value)
        _set_path(user, path, value)
        _set_path(flags, path, value)
    adapter = TypeAdapter(model)
    try:
        default = adapter.validate_python({})
        data, defaults = adapter.dump_python(default), adapter.dump_python(default, mode="json")
    except ValidationError:  # a model with required fields: nothing to start from
        data, defaults = {}, {}
    _drop_replaced_mappings(model, data, user)
    origin = f"{config_file}: " if config_file else ""
    try:
        config = adapter.validate_python(merge_settings(data, user, model))
    except ValidationError as err:
        if config_file is None:
            raise ConfigError(format_validation_error(err, "", model)) from None
        raise ConfigError(_blamed(validation_problems(err, model=model), model, config_file, overrides or {})) from None
    refused = booleans_for_numbers(config, user) + refused_choices(config, user, defaults, explicit=flags)
    if refused:
        raise ConfigError(origin + "invalid configuration: " + "; ".join(refused))
    for path, given in _set_per_run_given(model, adapter, data, user, defaults):
        print(f"warning: {origin}{path} {given!r} is not used: the command sets it for each run", file=sys.stderr)
    return config


def _set_per_run_given(
    model: Any, adapter: TypeAdapter, data: dict[str, Any], user: dict[str, Any], defaults: dict[str, Any]
) -> list[tuple[str, Any]]:
    """The settings of the model's `SET_PER_RUN` (a pipeline's `train.out`) that the YAML or a flag gives a value of its
    own, with that value: the command sets them for each run, so it is not used. The value the settings have without
    them (`collect.out` follows `out`) or the default (a dump of the settings, `show-config`'s) passes unsaid."""
    given = {path: cell(user, path) for path in sorted(getattr(model, "SET_PER_RUN", ()))}
    given = {path: value for path, value in given.items() if value is not MISSING}
    if not given:
        return []
    without = copy.deepcopy(user)
    for path in given:
        *parents, leaf = path.split(".")
        cell(without, ".".join(parents)).pop(leaf)
    resolved = adapter.dump_python(adapter.validate_python(merge_settings(data, without, model)), mode="json")
    return [(p, v) for p, v in given.items() if str(v) not in (str(cell(resolved, p)), str(cell(defaults, p)))]


def _blamed(problems: list[str], model: Any, config_file: Path, overrides: dict[str, Any]) -> str:
    """The problems of settings from a --config file and flags as one line: a setting a flag gave is named by the flag
    (`--lr: ...`), and the file only where one of its own settings is at fault (`tr.yaml: ... --lr -1` blamed the
    file, which has no lr)."""
    flags = {".".join(path): names[0] for path, names in _flag_names(model).items() if ".".join(path) in overrides}
    named = []
    for problem in problems:
        setting = next((s for s in flags if problem.startswith(s + ": ")), None)
        named.append(problem if setting is None else flags[setting] + problem[len(setting) :])
    from_file = any(ours == theirs for ours, theirs in zip(named, problems))
    return (f"{config_file}: " if from_file else "") + "invalid configuration: " + "; ".join(named)


def _let_flags_name_the_kind(model: Any, user: dict[str, Any], flags: dict[str, Any], path: str, value: Any) -> None:
    """Before a flag's setting joins the YAML's (`user`), let it name the kind of a section of several variants
    that the YAML gave a kind:

    - a kind named by the section's settings alone (a problem source, by `--source`): the YAML's `kind` goes, so
      the flags and YAML together name it (`--source hf:NAME` over a YAML file source switches it to a dataset);
    - a kind of its own (a backend's, `--strategy`; the YAML's section read in today's layout first): a flag for
      a setting that the YAML's kind lacks drops that kind, to be named again from the settings (`--nproc 2` over
      a one-process YAML: fsdp2); the kind's own flag switching kinds drops the YAML's settings the new kind
      lacks (they never act on it), not the flags'."""
    *parents, leaf = path.split(".")
    annotation: Any = model
    for name in parents:
        annotation = next((field_type(t, name) for t in section_types(annotation) if name in t.model_fields), None)
    variants, migrate = section_types(annotation), section_migration(annotation)
    if len(variants) < 2 or migrate is None:
        return
    section: Any = user
    given: Any = flags
    for name in parents:
        section = section.get(name) if isinstance(section, dict) else None
        given = given.get(name) if isinstance(given, dict) else None
    if not isinstance(section, dict):
        return
    if not kind_has_flag(annotation):
        if leaf != "kind":
            section.pop("kind", None)
        return
    if "kind" not in section and section and not given:  # the YAML's alone, before a flag joins it
        upgraded = migrate(dict(section))
        section.clear()
        section.update(upgraded)
    fields = settings_by_kind(annotation)
    kind = section.get("kind")
    if kind is None:
        return
    if leaf == "kind":
        if value != kind:
            flagged = set(given) if isinstance(given, dict) else set()
            for key in [k for k in section if k != "kind" and k not in fields.get(value, set()) | flagged]:
                del section[key]
    elif leaf not in fields.get(kind, set()) and not (isinstance(given, dict) and "kind" in given):
        section.pop("kind")  # the YAML's kind, not one a flag gave (`--strategy one-process --nproc 4` is refused)


def _drop_replaced_mappings(model: Any, data: dict[str, Any], user: dict[str, Any]) -> None:
    """Remove from the defaults `data` every mapping of free names (a `dict[str, ...]` field, such as a study's
    `arms`) that `user` gives: the user's mapping replaces the default one whole, where a section (a model)
    merges key by key. Otherwise a study listing its arms would also run the default arms it left out."""
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return
    for name, field in model.model_fields.items():
        if name not in user or not isinstance(data.get(name), dict):
            continue
        if get_origin(field.annotation) is dict:
            data.pop(name)
        elif isinstance(user[name], dict):
            _drop_replaced_mappings(field.annotation, data[name], user[name])


def dump_yaml(config: BaseModel) -> str:
    """The full configuration as YAML (every field, defaults included): a starting point for --config."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
