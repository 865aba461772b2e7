"""Problem-source settings: where problems come from and how to read them, one pydantic model per kind.

`ProblemSourceConfig` is a union discriminated by `kind`: `tiny-math` (`TinyMathSource`, the built-in
generator), `file` (`FileSource`, a local JSONL / JSON / Parquet / CSV file) and `hf` (`HfSource`, `source:
hf:NAME`, a Hugging Face dataset in the local cache); `source`, `split` and `limit` belong to all three. Each
kind holds only its own settings (`extra="forbid"`), so the Prefect UI's forms and `--help` show only what
applies, and a setting of another kind (`families` for a file) is refused by validation, naming it.

`kind` may be left out: it is then the kind `source` names (`tiny-math`, `hf:NAME`, else a file). That is how
every configuration and saved run was written before sources had a `kind`, and how the command line names
one (`--source`); `rlep.tasks.settings.migrate.upgrade_source_settings` is that rule (change 2 of the one
migration of settings), run by validation before the union picks a kind. `problem_source(...)` builds a source
from plain settings; data/sources.py loads the problems it names.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, field_validator

from rlep.data import tiny_math
from rlep.data.gold_answers import NO_ANSWER_VALUES
from rlep.data.source_rows import HF_PREFIX, peek_columns
from rlep.tasks.settings.migrate import SourceKind, kind_of_source, upgrade_source_settings
from rlep.tasks.settings.paths import UserPathOrName
from rlep.tasks.settings.strict import SETTINGS

_SOURCE_HELP = (
    "`tiny-math` (built in), a local .jsonl/.json/.parquet/.csv file, or `hf:NAME` for a Hugging Face dataset "
    "already in the local datasets cache (this machine cannot download). With no `kind` given, it also names the "
    "kind of source, and so which of the other settings apply."
)
_KIND_HELP = (
    "The kind of source: `tiny-math`, `file` or `hf`. Left out, it is the one `source` names (on the command line "
    "always: `--source`)."
)
# The kind has no flag of its own: `--source` names it (flows/options.py skips a field whose cli_flag is False).
_KIND_EXTRA = {"cli_flag": False}


class _Source(BaseModel):
    """The settings every kind of source has."""

    model_config = SETTINGS

    kind: SourceKind  # each kind narrows it to its own name, with that as the default
    source: str = Field("tiny-math", min_length=1, description=_SOURCE_HELP)  # each kind narrows it
    split: str = Field(
        "train",
        min_length=1,
        description="Split to load: tiny-math has `train` and `test`; `hf:` datasets their own; a local file only "
        "if it has a split column (see split_column), else the file is read whole.",
    )
    limit: int | None = Field(None, ge=1, description="Keep at most this many problems (first ones).")

    def refused_choices(self, given: Iterable[str]) -> list[str]:
        """Of the settings a user chose (`given`, names of fields), those this source cannot honour, with why:
        none but a file's split (`FileSource`). `rlep.tasks.settings.layering.refused_choices` asks, where
        settings are built from a user's files and flags, which alone tell a choice from a default a saved dump
        repeats."""
        return []


class TinyMathSource(_Source):
    """The built-in tiny-math generator (data/tiny_math.py)."""

    model_config = ConfigDict(**SETTINGS, title="tiny-math source")

    kind: Literal["tiny-math"] = Field("tiny-math", description=_KIND_HELP, json_schema_extra=_KIND_EXTRA)
    source: Literal["tiny-math"] = Field("tiny-math", description=_SOURCE_HELP)
    seed: int = Field(0, ge=0, description="Seed of the tiny-math generator.")
    tiny_math_size: int = Field(
        2000, ge=1, le=100_000, description="How many tiny-math problems the split has before `limit`."
    )
    families: list[Literal["add", "sub", "mul", "frac", "decimal"]] = Field(
        default_factory=lambda: list(tiny_math.FAMILIES),
        min_length=1,
        description="The families to draw from, in equal shares.",
    )
    levels: list[Literal[1, 2, 3]] = Field(
        default_factory=lambda: list(tiny_math.LEVELS),
        min_length=1,
        description="The difficulty levels to draw from, 1 = easiest.",
    )


class _RowSource(_Source):
    """A source of rows (a file or an `hf:` dataset): how problems, answers and ids are read from them."""

    layout: Literal["auto", "columns", "verl"] = Field(
        "auto",
        description="How a file's rows are laid out: `columns` (one column per field), `verl` (verl's "
        "preprocessed rows: chat `prompt`, `reward_model.ground_truth`, `extra_info.index`), or `auto`: verl's "
        "when the rows have a chat-message `prompt` and a `reward_model` struct.",
    )
    problem_column: str | None = Field(
        None,
        min_length=1,
        description="Column holding the problem: text, or a list of chat messages {role, content} whose last "
        "user message is the problem. Nested fields as `a.b`. Default: `problem` (verl layout: `prompt`).",
    )
    answer_column: str | None = Field(
        None,
        min_length=1,
        description="Column holding the gold answer (nested fields as `a.b`). Default: `answer` (verl layout: "
        "`reward_model.ground_truth`).",
    )
    answer_format: Literal["value", "boxed", "gsm8k"] = Field(
        "value",
        description="How the gold answer is written in answer_column: `value` (the answer itself), `boxed` "
        "(a worked solution whose LAST \\boxed{...} is the answer, as MATH's `solution` read by verl), `gsm8k` "
        "(a solution ending in `#### answer`, as GSM8K's `answer`; thousands commas removed, as verl does).",
    )
    id_column: str | None = Field(
        None,
        min_length=1,
        description="Column holding a unique problem id (read as text); default: `id` (verl layout: "
        "`extra_info.index`) if present, else `<file stem>:<row>`.",
    )
    data_source_column: str | None = Field(
        None,
        min_length=1,
        description="Column naming the problem family; default: `data_source` if present, else the file name.",
    )
    split_column: str | None = Field(
        None,
        min_length=1,
        description="Column naming each row's split, which `split` selects (local files); default: `split` or "
        "`extra_info.split` (verl) if present, else none and the file is read whole.",
    )
    invalid_rows: Literal["error", "skip"] = Field(
        "error",
        description="A row without a usable problem or answer (empty, a no-answer value, no final box): "
        "`error` stops naming the row; `skip` leaves it out and reports how many rows were skipped, per reason.",
    )
    no_answer_values: list[str] = Field(
        default_factory=lambda: list(NO_ANSWER_VALUES),
        description="Answer values that mean 'no answer' (compared without case or surrounding space); "
        "NuminaMath-1.5 writes `proof` and `notfound`.",
    )


class HfSource(_RowSource):
    """A Hugging Face dataset already in the local datasets cache, `hf:NAME`."""

    model_config = ConfigDict(**SETTINGS, title="hf: dataset source")

    kind: Literal["hf"] = Field("hf", description=_KIND_HELP, json_schema_extra=_KIND_EXTRA)
    source: str = Field(..., pattern=r"^hf:.+", description=_SOURCE_HELP)
    subset: str | None = Field(
        None,
        min_length=1,
        description="The dataset's subset (config name), e.g. `main` for openai/gsm8k.",
    )


class FileSource(_RowSource):
    """A local JSONL / JSON / Parquet / CSV file."""

    model_config = ConfigDict(**SETTINGS, title="file source")

    kind: Literal["file"] = Field("file", description=_KIND_HELP, json_schema_extra=_KIND_EXTRA)
    # The schema says what the validator below checks, so that a section without `kind` matches one kind only
    # in the JSON schema too (the Prefect server checks a deployment's parameters against its `oneOf`).
    source: UserPathOrName = Field(
        ...,
        min_length=1,
        description=_SOURCE_HELP,
        json_schema_extra={"not": {"anyOf": [{"const": "tiny-math"}, {"pattern": f"^{HF_PREFIX}"}]}},
    )

    @field_validator("source")
    @classmethod
    def _a_path(cls, source: str) -> str:
        if kind_of_source(source) != "file":
            raise ValueError(f"{source!r} is not a file: it names the {kind_of_source(source)} kind of source")
        return source

    def refused_choices(self, given: Iterable[str]) -> list[str]:
        """A split the file cannot select: it has no split column (its first row is read to tell)."""
        if "split" in set(given) and self.split_column is None:
            columns = peek_columns(Path(self.source))
            if columns is not None and not any(c in columns for c in SPLIT_COLUMNS):
                return [
                    f"split: {self.source} has no split column ({' or '.join(SPLIT_COLUMNS)}) to choose rows by; "
                    "a file without one is read whole (drop the split, or name the column with split_column)"
                ]
        return []


SOURCE_KINDS = {"tiny-math": TinyMathSource, "file": FileSource, "hf": HfSource}
SPLIT_COLUMNS = ("split", "extra_info.split")  # the split columns a file is looked for (verl's is nested)


# Where problems come from and how to read them: one of three kinds, each with only its own settings (so the
# Prefect UI's forms and `--help` show only what applies).
ProblemSourceConfig = Annotated[
    Annotated[TinyMathSource | FileSource | HfSource, Field(discriminator="kind")],
    BeforeValidator(upgrade_source_settings),
]
_SOURCE_ADAPTER: TypeAdapter[TinyMathSource | FileSource | HfSource] = TypeAdapter(ProblemSourceConfig)


def problem_source(**settings: Any) -> TinyMathSource | FileSource | HfSource:
    """The source `settings` describe (e.g. `problem_source(source="data/x.parquet", answer_format="boxed")`;
    the kind is read from `source` unless `kind` is given)."""
    return _SOURCE_ADAPTER.validate_python(settings)


# The default task of `rlep collect / train / eval`: 1-decimal addition (a.b+c.d), the tiny-math cell the
# default tiny model is half-way through learning, so GRPO has both signal and room (docs/tiny_model.md).
DEFAULT_TASK = {"families": ["decimal"], "levels": [1]}


def default_task(split: str, **settings: Any) -> TinyMathSource:
    """The default task's `split`, as a tiny-math source."""
    return TinyMathSource(split=split, **DEFAULT_TASK, **settings)
