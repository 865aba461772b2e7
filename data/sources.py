"""Problem sources: the built-in tiny-math generator, local JSONL / Parquet / CSV files, Hugging Face datasets.

`load_problems(problem_source(...))` is the one entry point (`load_source` also returns what was left
out and why). A file is read in one of two layouts: `columns` (a text column per field, named by the
`*_column` settings) or verl's preprocessed layout (data/verl_format.py: chat `prompt`, `reward_model.
ground_truth`, `extra_info.index`), detected when a file has verl's columns. Gold answers are read by the
conventions of the projects that wrote the files (data/gold_answers.py). Every failure a user can cause
(unknown source, missing column, a list where text belongs, empty or unreadable file, a split the file
does not have) raises `ProblemSourceError` with one message naming the file, the row and the column; the
CLI turns it into exit code 2 before anything is written.

Rows without a usable answer (empty, NuminaMath's `proof` / `notfound`, a solution with no final box) stop
the load by default, naming the row; `invalid_rows: skip` leaves them out and reports how many, per reason.
Stopping is the default because skipping changes which problems a run trains or is scored on, which a user
should choose knowingly (a benchmark with rows silently left out is no longer the published benchmark).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter, model_validator

from rlep.data import tiny_math
from rlep.data.columns import (
    CellError,
    cell,
    chat_messages,
    column_names,
    has_column,
    is_chat_messages,
    last_user_message,
    text_cell,
)
from rlep.data.gold_answers import NO_ANSWER_VALUES, difficulty_level, gsm8k_final_answer, last_boxed_answer
from rlep.data.problem import Problem
from rlep.data.source_rows import (
    HF_PREFIX,
    LOCAL_SUFFIXES,
    ProblemSourceError,
    file_rows,
    hf_rows,
    peek_columns,
)
from rlep.data.verl_format import VERL_COLUMNS, looks_like_verl, verl_extra

log = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class SourceLoad:
    """What a load gave: the problems, how many rows were read, and the rows left out per reason."""

    problems: list[Problem]
    rows: int  # rows of the chosen split (all rows of a file without a split column)
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> rows left out (invalid_rows: skip)
    layout: str = "columns"  # `tiny-math`, `columns` or `verl`
    split: str | None = None  # the split the rows are of; None: a file without a split column, read whole
    split_column: str | None = None  # the file's column the split was chosen by, if any

    def summary(self) -> str:
        """One line for a CLI, e.g. `3 rows of split 'test' (verl layout, split column extra_info.split);
        skipped 1 without a usable problem or answer (empty answer: 1)`."""
        where = f" of split {self.split!r}" if self.split is not None else ", the whole file"
        how = f"{self.layout} layout" + (f", split column {self.split_column}" if self.split_column else "")
        how += ", no split column" if self.split is None else ""
        line = f"{self.rows} rows{where} ({how})"
        if self.skipped:
            reasons = ", ".join(f"{reason}: {count}" for reason, count in sorted(self.skipped.items()))
            line += f"; skipped {sum(self.skipped.values())} without a usable problem or answer ({reasons})"
        return line


def load_problems(config: ProblemSourceConfig) -> list[Problem]:
    """The problems `config` names, in source order, at most `config.limit` of them."""
    return load_source(config).problems


def load_source(config: ProblemSourceConfig) -> SourceLoad:
    """`load_problems` with the counts: rows read, rows skipped per reason (logged as a warning too)."""
    if isinstance(config, TinyMathSource):
        size = config.limit if config.limit is not None else config.tiny_math_size
        try:
            problems = tiny_math.generate(
                config.split, size, seed=config.seed, families=config.families, levels=config.levels
            )
        except ValueError as err:
            raise ProblemSourceError(f"tiny-math: {err}") from None
        return SourceLoad(problems=problems, rows=len(problems), layout="tiny-math", split=config.split)
    if isinstance(config, HfSource):
        name = config.source[len(HF_PREFIX) :]
        rows, origin, default_family = hf_rows(name, config.subset, config.split), config.source, name
    else:
        path = Path(config.source)
        if path.suffix.lower() not in LOCAL_SUFFIXES:
            raise ProblemSourceError(
                f"unknown problem source {config.source!r}: expected `tiny-math`, `hf:NAME`, or a file ending "
                f"in {', '.join(LOCAL_SUFFIXES)}"
            )
        rows, origin, default_family = file_rows(path), str(path), path.stem
    loaded = _to_problems(rows, origin, default_family, config, local=isinstance(config, FileSource))
    if loaded.skipped:
        log.warning("%s: %s", origin, loaded.summary())
    if config.limit is not None:
        loaded = dataclasses.replace(loaded, problems=loaded.problems[: config.limit])
    return loaded


@dataclass(frozen=True)
class _Columns:
    """The column each Problem field is read from, resolved against a file's first row."""

    layout: str
    problem: str
    answer: str
    id: str | None
    data_source: str | None
    split: str | None


def _resolve_columns(first: dict[str, Any], origin: str, config: _RowSource, local: bool) -> _Columns:
    verl = looks_like_verl(first)
    if config.layout == "verl" and not verl:
        raise ProblemSourceError(
            f"{origin}: layout 'verl' expects a chat-message column 'prompt' and a struct column 'reward_model'; "
            f"columns found: {sorted(column_names(first))}"
        )
    layout = "verl" if config.layout == "verl" or (config.layout == "auto" and verl) else "columns"
    defaults = VERL_COLUMNS if layout == "verl" else {"problem_column": "problem", "answer_column": "answer"}

    def required(name: str) -> str:
        column = getattr(config, name) or defaults[name]
        if not has_column(first, column):
            raise ProblemSourceError(
                f"{origin}: missing column {column!r} (set by {name}); columns found: {sorted(column_names(first))}"
            )
        return column

    def optional(name: str, *fallbacks: str) -> str | None:
        chosen = getattr(config, name)
        if chosen is not None:
            return required(name)
        candidates = ([defaults[name]] if name in defaults else []) + list(fallbacks)
        return next((c for c in candidates if has_column(first, c)), None)

    split = optional("split_column", *SPLIT_COLUMNS) if local or config.split_column else None
    return _Columns(
        layout,
        required("problem_column"),
        required("answer_column"),
        optional("id_column", "id"),
        optional("data_source_column", "data_source"),
        split,
    )


def _select_split(
    rows: list[dict[str, Any]], origin: str, split: str, column: str | None
) -> list[tuple[int, dict[str, Any]]]:
    """(row number, row) of the rows of `split`; all rows when there is no split column."""
    numbered = list(enumerate(rows))
    if column is None:
        log.info("%s: no split column, all %d rows read (split %r chooses nothing here)", origin, len(rows), split)
        return numbered
    chosen = [(n, row) for n, row in numbered if cell(row, column) == split]
    if not chosen:
        found = sorted({str(cell(row, column)) for row in rows})
        raise ProblemSourceError(
            f"{origin}: no rows of split {split!r} in column {column!r} (it holds: {', '.join(found)}); choose one "
            f"with split (--split)"
        )
    return chosen


def _to_problems(
    rows: list[dict[str, Any]], origin: str, default_family: str, config: _RowSource, local: bool
) -> SourceLoad:
    columns = _resolve_columns(rows[0], origin, config, local)
    chosen = _select_split(rows, origin, config.split, columns.split)
    no_answer = {value.strip().lower() for value in config.no_answer_values}
    problems, seen, skipped = [], set(), Counter()
    for index, row in chosen:
        try:
            problem = _problem(row, index, origin, default_family, columns, config, no_answer)
        except CellError as err:
            raise ProblemSourceError(str(err)) from None
        if isinstance(problem, _Unusable):
            if config.invalid_rows == "error":
                raise ProblemSourceError(
                    f"{origin}: row {index}: {problem.reason} in column {problem.column!r}; "
                    "set invalid_rows to skip (--invalid-rows skip) to leave such rows out"
                )
            skipped[problem.reason] += 1
            continue
        if problem.id in seen:
            raise ProblemSourceError(f"{origin}: row {index}: duplicate id {problem.id!r} in column {columns.id!r}")
        seen.add(problem.id)
        problems.append(problem)
    if not problems:
        raise ProblemSourceError(f"{origin}: no usable rows: all {len(chosen)} were skipped ({dict(skipped)})")
    split = config.split if columns.split or not local else None
    return SourceLoad(problems, len(chosen), dict(skipped), columns.layout, split, columns.split)


@dataclass(frozen=True)
class _Unusable:
    """Why a row gives no problem (a reason counted when rows are skipped) and the column at fault."""

    reason: str
    column: str


def _problem(
    row: dict[str, Any],
    index: int,
    origin: str,
    default_family: str,
    columns: _Columns,
    config: _RowSource,
    no_answer: set[str],
) -> Problem | _Unusable:
    """The row's Problem, or why the row has no usable problem or answer. A cell of the wrong kind (a list
    or dict where text belongs) raises `CellError`: that is a wrong column, not a bad row."""

    def where(column: str) -> str:
        return f"{origin}: row {index}, column {column!r}"

    value = cell(row, columns.problem)
    if isinstance(value, (list, tuple)) and value:
        messages = chat_messages(value, where(columns.problem))
        text = last_user_message(messages, where(columns.problem))
        text = text if text.strip() else None
    else:
        text, messages = text_cell(value, where(columns.problem)), None
        if is_chat_messages(row.get("messages")):  # a problems file written by rlep keeps its chat prompt
            messages = chat_messages(row["messages"], where("messages"))
    if text is None:
        return _Unusable("empty problem", columns.problem)
    answer = text_cell(cell(row, columns.answer), where(columns.answer))
    if answer is None:
        return _Unusable("empty answer", columns.answer)
    if answer.strip().lower() in no_answer:
        return _Unusable(f"no-answer value {answer.strip()!r}", columns.answer)
    if config.answer_format == "boxed":
        answer = last_boxed_answer(answer)
        if answer is None:
            return _Unusable("no final \\boxed{...}", columns.answer)
    elif config.answer_format == "gsm8k":
        answer = gsm8k_final_answer(answer)
        if answer is None:
            return _Unusable("no `#### answer` line", columns.answer)
    pid = text_cell(cell(row, columns.id), where(columns.id)) if columns.id else f"{default_family}:{index}"
    if pid is None:
        raise CellError(f"{where(columns.id)}: empty id")
    family = text_cell(cell(row, columns.data_source), where(columns.data_source)) if columns.data_source else None
    if columns.layout == "verl":
        extra = verl_extra(row)
    else:
        extra = row.get("extra") if isinstance(row.get("extra"), dict) else None
    return Problem(
        id=pid,
        problem=text,
        answer=answer.strip(),
        data_source=family or default_family,
        level=difficulty_level(row.get("level")),
        messages=messages,
        extra=extra,
    )


def write_problems(problems: list[Problem], out: Path) -> Path:
    """Write problems as JSONL or Parquet (by suffix), atomically: a temporary file renamed into place."""
    suffix = out.suffix.lower()
    if suffix not in (".jsonl", ".parquet"):
        raise ProblemSourceError(f"{out}: output must end in .jsonl or .parquet")
    from rlep.data.fs import write_parquet_atomic, write_text_atomic  # pyarrow only when writing

    rows = [p.to_dict() for p in problems]
    if suffix == ".parquet":
        write_parquet_atomic(out, rows)
    else:
        write_text_atomic(out, "".join(json.dumps(row) + "\n" for row in rows))
    return out
