"""Problem-source settings: where problems come from and how to read them, one pydantic model per kind.

`source` names both the place and the kind of source, and `ProblemSourceConfig` is a union discriminated by it:
`TinyMathSource` (the built-in generator), `FileSource` (a local JSONL / JSON / Parquet / CSV file) and
`HfSource` (`hf:NAME`, a Hugging Face dataset in the local cache); `split` and `limit` belong to all three.
Each kind holds only its own settings, so the Prefect UI's forms and `--help` show only what applies, and a
setting given for another kind is refused naming it (`settings_not_applying`). `problem_source(...)` builds
one from plain settings; data/sources.py loads the problems it names.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter, model_validator

from rlep.data import tiny_math
from rlep.data.gold_answers import NO_ANSWER_VALUES
from rlep.data.source_rows import HF_PREFIX, peek_columns

_SOURCE_HELP = (
    "`tiny-math` (built in), a local .jsonl/.json/.parquet/.csv file, or `hf:NAME` for a Hugging Face dataset "
    "already in the local datasets cache (this machine cannot download). It also names the kind of source, and "
    "so which of the other settings apply."
)


class _Source(BaseModel):
    """The settings every kind of source has. A source's kind is read from `source` itself (`tiny-math`,
    `hf:NAME`, else a file), so the union below is discriminated by that string rather than by a `kind` field:
    configurations write `source: data/x.parquet` as they always have."""

    model_config = ConfigDict(extra="forbid")

    source: str = Field("tiny-math", min_length=1, description=_SOURCE_HELP)  # each kind narrows it
    split: str = Field(
        "train",
        min_length=1,
        description="Split to load: tiny-math has `train` and `test`; `hf:` datasets their own; a local file only "
        "if it has a split column (see split_column), else the file is read whole.",
    )
    limit: int | None = Field(None, ge=1, description="Keep at most this many problems (first ones).")

    @classmethod
    def _other_kinds(cls) -> dict[str, Any]:
        """The settings only other kinds of source have, with their defaults, in the kinds' order."""
        return {
            name: field.get_default(call_default_factory=True)
            for kind in SOURCE_KINDS
            for name, field in kind.model_fields.items()
            if name not in cls.model_fields
        }

    # Settings of another kind of source are dropped on validation: a section merged from defaults (e.g. the
    # default task's `families`) keeps them when a user switches it to a file. A user who GIVES one is refused
    # by `settings_not_applying` (through `build_config`), so nothing a user chose is ignored silently.
    @model_validator(mode="before")
    @classmethod
    def _drop_other_kinds(cls, data: Any) -> Any:
        if isinstance(data, dict):
            other = cls._other_kinds()
            return {key: value for key, value in data.items() if key not in other}
        return data

    @classmethod
    def defaults_of_other_kinds(cls) -> dict[str, Any]:
        """The defaults of the settings only other kinds of source have (`tasks.settings.settings_not_applying`:
        a saved dump holding them at their defaults is no choice of the user's)."""
        return cls._other_kinds()

    def settings_not_applying(self, given: Iterable[str]) -> list[str]:
        """Of the settings a user `given` (names of fields), those this kind of source has no use for, with why.

        The configuration builder refuses them rather than silently reading other problems than the user asked
        for. (A model built in code drops them unchecked.)"""
        given, this = set(given), "tiny-math" if self.source == "tiny-math" else f"source {self.source!r}"
        return [f"{name}: {_APPLIES_TO[name]}, not to {this}" for name in self._other_kinds() if name in given]


class TinyMathSource(_Source):
    """The built-in tiny-math generator (data/tiny_math.py)."""

    model_config = ConfigDict(extra="forbid", title="tiny-math source")

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

    model_config = ConfigDict(extra="forbid", title="hf: dataset source")

    source: str = Field(..., pattern=r"^hf:.+", description=_SOURCE_HELP)
    subset: str | None = Field(
        None,
        min_length=1,
        description="The dataset's subset (config name), e.g. `main` for openai/gsm8k.",
    )


class FileSource(_RowSource):
    """A local JSONL / JSON / Parquet / CSV file."""

    # python-re: the pattern's lookaheads (which keep the JSON schema's variants exclusive, as the Prefect
    # server's oneOf check needs) are beyond pydantic's default regex engine.
    model_config = ConfigDict(extra="forbid", title="file source", regex_engine="python-re")

    source: str = Field(..., pattern=r"^(?!tiny-math$)(?!hf:).+", description=_SOURCE_HELP)

    def settings_not_applying(self, given: Iterable[str]) -> list[str]:
        """Also a split the file cannot select (it has no split column: its first row is read to tell)."""
        refused = super().settings_not_applying(given)
        if "split" in set(given) and self.split_column is None:
            columns = peek_columns(Path(self.source))
            if columns is not None and not any(c in columns for c in SPLIT_COLUMNS):
                refused.append(
                    f"split: {self.source} has no split column ({' or '.join(SPLIT_COLUMNS)}) to choose rows by; "
                    "a file without one is read whole (drop the split, or name the column with split_column)"
                )
        return refused


TINY_MATH_ONLY = tuple(
    name for name in TinyMathSource.model_fields if name not in _Source.model_fields and name != "source"
)
FILE_ONLY = tuple(name for name in _RowSource.model_fields if name not in _Source.model_fields)
_APPLIES_TO = {
    **{name: "applies to tiny-math only" for name in TINY_MATH_ONLY},
    **{name: "applies to files and hf: datasets" for name in FILE_ONLY},
    "subset": "applies to hf: datasets only",
}
SOURCE_KINDS = (TinyMathSource, FileSource, HfSource)
SPLIT_COLUMNS = ("split", "extra_info.split")  # the split columns a file is looked for (verl's is nested)


def source_kind(value: Any) -> str:
    """`tiny-math`, `hf` or `file`: the kind of source a section (a dict or a validated source) is."""
    source = value.get("source", "tiny-math") if isinstance(value, dict) else getattr(value, "source", "tiny-math")
    if source == "tiny-math":
        return "tiny-math"
    return "hf" if isinstance(source, str) and source.startswith(HF_PREFIX) else "file"


# Where problems come from and how to read them: one of three kinds, each with only its own settings (so the
# Prefect UI's forms and `--help` show only what applies).
ProblemSourceConfig = Annotated[
    Annotated[TinyMathSource, Tag("tiny-math")] | Annotated[FileSource, Tag("file")] | Annotated[HfSource, Tag("hf")],
    Discriminator(source_kind),
]
_SOURCE_ADAPTER: TypeAdapter[TinyMathSource | FileSource | HfSource] = TypeAdapter(ProblemSourceConfig)


def problem_source(**settings: Any) -> TinyMathSource | FileSource | HfSource:
    """The source `settings` describe (e.g. `problem_source(source="data/x.parquet", answer_format="boxed")`)."""
    return _SOURCE_ADAPTER.validate_python(settings)


# The default task of `rlep collect / train / eval`: 1-decimal addition (a.b+c.d), the tiny-math cell the
# default tiny model is half-way through learning, so GRPO has both signal and room (docs/tiny_model.md).
DEFAULT_TASK = {"families": ["decimal"], "levels": [1]}


def default_task(split: str, **settings: Any) -> TinyMathSource:
    """The default task's `split`, as a tiny-math source."""
    return TinyMathSource(split=split, **DEFAULT_TASK, **settings)
