"""Loading a problem source: its rows read and turned into `Problem` records, with what was left out and why.

`load_problems(problem_source(...))` is the one entry point (`load_source` also returns what was left
out and why); the settings, one model per kind of source, are tasks/settings/source.py's. A file is read in one
of two layouts: `columns` (a text column per field, named by the `*_column` settings) or verl's preprocessed
layout (data/verl_format.py: chat `prompt`, `reward_model.ground_truth`, `extra_info.index`), detected when a
file has verl's columns; its raw rows come from data/source_rows.py. Gold answers are read by the
conventions of the projects that wrote the files (data/gold_answers.py). Every failure a user can cause
(unknown source, missing column, a list where text belongs, empty or unreadable file, a split the file
does not have) raises `ProblemSourceError` with one message naming the file, the row and the column; the
CLI turns it into exit code 2 before anything is written. Rows are counted from 1 among the file's rows, as a user
counts them (`row 1` is the first object of a JSON list or Parquet table, the first record of a JSONL file, the
first row under a CSV's header), and over the whole file when a split column chooses some of them.

Rows without a usable answer (empty, NuminaMath's `proof` / `notfound`, a solution with no final box) stop
the load by default, naming the row; `invalid_rows: skip` leaves them out and reports how many, per reason.
Stopping is the default because skipping changes which problems a run trains or is scored on, which a user
should choose knowingly (a benchmark with rows silently left out is no longer the published benchmark).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

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
from rlep.data.gold_answers import difficulty_level, gsm8k_final_answer, last_boxed_answer
from rlep.data.problem import Problem
from rlep.data.source_rows import (
    HF_PREFIX,
    LOCAL_SUFFIXES,
    ProblemSourceError,
    file_rows,
    hf_rows,
)
from rlep.data.verl_format import VERL_COLUMNS, looks_like_verl, verl_extra
from rlep.tasks.settings.source import (
    SPLIT_COLUMNS,
    FileSource,
    HfSource,
    ProblemSourceConfig,
    TinyMathSource,
)

# The documented entry point is `load_problems(problem_source(...))`, `problem_source` being the settings'
# (rlep.tasks.settings.source); the error is importable from here too.
__all__ = [
    "ProblemSourceError",
    "SourceLoad",
    "load_problems",
    "load_source",
    "write_problems",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SourceLoad:
    """What a load gave: the problems, how many rows were read, and the rows left out per reason."""

    problems: list[Problem]
    rows: int  # rows of the chosen split read (all of a file without a split column), up to the `limit`-th problem
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
    """The problems `config` names, in source order, at most `config.limit` of them (rows after the `limit`-th
    usable one are not read: an invalid row there is neither an error nor counted as skipped)."""
    return load_source(config).problems


def check_source(config: ProblemSourceConfig, setting: str) -> None:
    """`load_problems(config)` as a check before a long step: its error names the `setting` that gave the source
    (`evaluate.problems: tiny-math: unknown split ...`; a pipeline has four sections of problems). Silent on rows
    it skips: the step's own reading says so, once."""
    try:
        load_source(config, warn=False)
    except ProblemSourceError as err:
        raise ProblemSourceError(f"{setting}: {err}") from None


def load_source(config: ProblemSourceConfig, warn: bool = True) -> SourceLoad:
    """`load_problems` with the counts: rows read, rows skipped per reason (logged as a warning too, unless `warn`
    is off: a caller that reports the summary itself)."""
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
    if loaded.skipped and warn:
        log.warning("warning: %s: %s", origin, loaded.summary())
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


def _resolve_columns(first: dict[str, Any], origin: str, config: FileSource | HfSource, local: bool) -> _Columns:
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
    rows: list[dict[str, Any]], origin: str, default_family: str, config: FileSource | HfSource, local: bool
) -> SourceLoad:
    columns = _resolve_columns(rows[0], origin, config, local)
    chosen = _select_split(rows, origin, config.split, columns.split)
    no_answer = {value.strip().lower() for value in config.no_answer_values}
    problems, seen, skipped = [], set(), Counter()
    read = 0
    for index, row in chosen:
        if config.limit is not None and len(problems) == config.limit:
            break  # rows past the limit are neither read nor counted as skipped
        read += 1
        try:
            problem = _problem(row, index, origin, default_family, columns, config, no_answer)
        except CellError as err:
            raise ProblemSourceError(str(err)) from None
        if isinstance(problem, _Unusable):
            if config.invalid_rows == "error":
                raise ProblemSourceError(
                    f"{origin}: row {index + 1}: {problem.reason} in column {problem.column!r}; "
                    "set invalid_rows to skip (--invalid-rows skip) to leave such rows out"
                )
            skipped[problem.reason] += 1
            continue
        if problem.id in seen:
            raise ProblemSourceError(f"{origin}: row {index + 1}: duplicate id {problem.id!r} in column {columns.id!r}")
        seen.add(problem.id)
        problems.append(problem)
    if not problems:
        raise ProblemSourceError(f"{origin}: no usable rows: all {len(chosen)} were skipped ({dict(skipped)})")
    split = config.split if columns.split or not local else None
    return SourceLoad(problems, read, dict(skipped), columns.layout, split, columns.split)


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
    config: FileSource | HfSource,
    no_answer: set[str],
) -> Problem | _Unusable:
    """The row's Problem, or why the row has no usable problem or answer. A cell of the wrong kind (a list
    or dict where text belongs) raises `CellError`: that is a wrong column, not a bad row."""

    def where(column: str) -> str:  # rows counted from 1 (the module docstring); `index` from 0, as in the id below
        return f"{origin}: row {index + 1}, column {column!r}"

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


class ProblemsOutput(BaseModel):
    """Where `rlep problems` writes (`write_problems`' file); what it writes is a ProblemSourceConfig."""

    model_config = ConfigDict(extra="forbid")

    out: Path = Field(description="Output file, .jsonl or .parquet.")


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
