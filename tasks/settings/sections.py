"""The sections of a settings model, found from its annotations: which BaseModel classes a field holds (one, or
the variants of a union discriminated by `kind`) and which annotation a field has. The migration
(`rlep.tasks.settings.migrate.in_current_layout`), the layering (`rlep.tasks.settings.layering.merge_settings`)
and the CLI's flags (flows/options.py) walk a model with these."""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any, get_args, get_origin

from pydantic import BaseModel


def section_types(annotation: Any) -> list[type[BaseModel]]:
    """The BaseModel classes an annotation holds: one for `X` or `X | None`, several for a union of variants
    (each possibly `Annotated` with its tag, the union with its discriminator)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return section_types(get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [m for a in get_args(annotation) if a is not type(None) for m in section_types(a)]
    return [annotation] if isinstance(annotation, type) and issubclass(annotation, BaseModel) else []


def field_type(model: Any, name: str) -> Any:
    """The annotation of field `name` of `model` (a BaseModel class), its pydantic metadata (validators)
    kept; None when `model` has no such field."""
    if not (isinstance(model, type) and issubclass(model, BaseModel)) or name not in model.model_fields:
        return None
    field = model.model_fields[name]
    return Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation


def settings_by_kind(annotation: Any) -> dict[Any, set[str]]:
    """The settings (field names) of each variant of a union discriminated by `kind`, by its kind."""
    return {
        v.model_fields["kind"].default: set(v.model_fields)
        for v in section_types(annotation)
        if "kind" in v.model_fields
    }


def kind_has_flag(annotation: Any) -> bool:
    """Whether the `kind` of a union of variants is a setting of its own, with a flag (a backend's: `--strategy`),
    rather than named by the section's other settings alone (a problem source's, by `--source`: its kind has
    `cli_flag` False)."""
    kinds = [v.model_fields["kind"] for v in section_types(annotation) if "kind" in v.model_fields]
    return any(
        (f.json_schema_extra or {}).get("cli_flag", True) is not False
        for f in kinds
        if not callable(f.json_schema_extra)
    )
