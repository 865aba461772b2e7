"""A bench's flags for its own `python -m rlep.tasks.bench.NAME` entry point, made from its settings model.

That entry point runs without rlep's command line (tasks do not import flows); `rlep bench NAME` makes the same
flags from the same model with `flows.options.add_model_flags`. One flag per field, `--field-name` (or its
`cli_flag`), the description its help; a `Literal` gives the choices, a list takes values, a bool is
`--x/--no-x` and a `cli_switch` field is its flag alone. pydantic converts and checks the values.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, Literal, TypeVar, get_args, get_origin

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


def add_flags(parser: argparse.ArgumentParser, model: type[BaseModel]) -> None:
    """One flag per field of the flat settings model `model` (its values stored under the field's name)."""
    for name, field in model.model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        flag = "--" + (extra.get("cli_flag") or name).replace("_", "-")
        kwargs: dict[str, Any] = {"dest": name, "default": argparse.SUPPRESS, "help": _help(field, extra)}
        annotation = field.annotation
        item = get_args(annotation)[0] if get_origin(annotation) in (list, tuple) else annotation
        if extra.get("cli_switch"):
            kwargs.update(action="store_const", const=not field.default)
        elif annotation is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["required"] = field.is_required()
            if get_origin(item) is Literal:
                kwargs["choices"] = [str(choice) for choice in get_args(item)]
            if item is not annotation:
                kwargs["nargs"] = "+"
            if "cli_metavar" in extra:
                kwargs["metavar"] = extra["cli_metavar"]
        parser.add_argument(flag, **kwargs)


def parse(model: type[M], parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> M:
    """The settings the command line gives (every field `add_flags` made), checked; a bad value exits with 2."""
    return settings(model, parser, parser.parse_args(argv))


def settings(model: type[M], parser: argparse.ArgumentParser, args: argparse.Namespace) -> M:
    """`model` from parsed flags (others than its fields' are left out), checked; a bad value exits with 2."""
    values = vars(args)
    try:
        return model.model_validate({name: value for name, value in values.items() if name in model.model_fields})
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        parser.error(f"invalid settings: {problems}")


def _help(field: Any, extra: dict[str, Any]) -> str:
    shown = not (field.is_required() or extra.get("cli_switch"))
    default = f" [default: {field.get_default(call_default_factory=True)}]" if shown else ""
    return f"{field.description or ''}{default}".replace("%", "%%")
