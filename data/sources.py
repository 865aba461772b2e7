"""Problem sources: the built-in tiny-math generator, local JSONL / Parquet / CSV files, Hugging Face datasets.

`load_problems(ProblemSourceConfig(...))` is the one entry point. Every failure a user can cause (unknown
source, missing column, empty or unreadable file, bad encoding) raises `ProblemSourceError` with one
message naming the file and the column; the CLI turns it into exit code 2 before anything is written.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from data import tiny_math
from data.problem import Problem
from verifiers.extract import answer_in_solution

LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")
HF_PREFIX = "hf:"


class ProblemSourceError(ValueError):
    """A problem source that cannot be read as asked; the message names the file and the column."""


class ProblemSourceConfig(BaseModel):
    """Where problems come from and how to read them."""

    model_config = ConfigDict(extra="forbid")

    source: str = Field(
        "tiny-math",
        min_length=1,
        description="`tiny-math` (built in), a local .jsonl/.json/.parquet/.csv file, or `hf:NAME` for a "
        "Hugging Face dataset already in the local datasets cache (this machine cannot download).",
    )
    split: str = Field("train", min_length=1, description="Split to load: tiny-math has `train` and `test`.")
    limit: int | None = Field(None, ge=1, description="Keep at most this many problems (first ones).")
    seed: int = Field(0, ge=0, description="Seed of the tiny-math generator (tiny-math only).")
    tiny_math_size: int = Field(
        2000, ge=1, le=100_000, description="How many tiny-math problems the split has before `limit` (tiny-math only)."
    )
    families: list[Literal["add", "sub", "mul", "frac", "decimal"]] = Field(
        default_factory=lambda: list(tiny_math.FAMILIES),
        min_length=1,
        description="tiny-math: the families to draw from, in equal shares (tiny-math only).",
    )
    levels: list[Literal[1, 2, 3]] = Field(
        default_factory=lambda: list(tiny_math.LEVELS),
        min_length=1,
        description="tiny-math: the difficulty levels to draw from, 1 = easiest (tiny-math only).",
    )
    problem_column: str = Field("problem", min_length=1, description="Column holding the problem text.")
    answer_column: str = Field("answer", min_length=1, description="Column holding the gold answer.")
    answer_format: Literal["value", "boxed", "gsm8k"] = Field(
        "value",
        description="How the gold answer is written in answer_column: `value` (the answer itself), `boxed` "
        "(a worked solution whose final \\boxed{...} is the answer, as MATH's `solution`), `gsm8k` (a "
        "solution ending in `#### answer`, as GSM8K's `answer`). A row with no such answer is an error.",
    )
    id_column: str | None = Field(
        None, description="Column holding a unique problem id; default: `id` if present, else the row number."
    )
    data_source_column: str | None = Field(
        None,
        description="Column naming the problem family; default: `data_source` if present, else the file name.",
    )

    def settings_not_applying(self, given: Iterable[str]) -> list[str]:
        """Of the settings a user `given` (names of fields), those this source has no use for, with why.

        The tiny-math settings mean nothing to a file or a dataset; the configuration builder refuses them
        there rather than silently training on other problems than the user asked for. (Their defaults
        stay in every configuration, so a model built in code is not checked.)
        """
        if self.source == "tiny-math":
            return []
        return [f"{name}: applies to tiny-math only, not to source {self.source!r}" for name in TINY_MATH_ONLY if name in given]


TINY_MATH_ONLY = ("seed", "tiny_math_size", "families", "levels")


# The default task of `rlep collect / train / eval`: 1-decimal addition (a.b+c.d), the tiny-math cell the
# default tiny model is half-way through learning, so GRPO has both signal and room (docs/tiny_model.md).
DEFAULT_TASK = {"families": ["decimal"], "levels": [1]}


def default_task(split: str, **settings: Any) -> ProblemSourceConfig:
    """A `ProblemSourceConfig` of the default task's `split`."""
    return ProblemSourceConfig(split=split, **DEFAULT_TASK, **settings)


def load_problems(config: ProblemSourceConfig) -> list[Problem]:
    """The problems `config` names, in source order, at most `config.limit` of them."""
    if config.source == "tiny-math":
        size = config.limit if config.limit is not None else config.tiny_math_size
        try:
            return tiny_math.generate(config.split, size, seed=config.seed, families=config.families, levels=config.levels)
        except ValueError as err:
            raise ProblemSourceError(f"tiny-math: {err}") from None
    if config.source.startswith(HF_PREFIX):
        rows, origin = _hf_rows(config.source[len(HF_PREFIX) :], config.split), config.source
        default_family = config.source[len(HF_PREFIX) :]
    else:
        path = Path(config.source)
        if path.suffix.lower() not in LOCAL_SUFFIXES:
            raise ProblemSourceError(
                f"unknown problem source {config.source!r}: expected `tiny-math`, `hf:NAME`, or a file ending "
                f"in {', '.join(LOCAL_SUFFIXES)}"
            )
        rows, origin, default_family = _file_rows(path), str(path), path.stem
    problems = _to_problems(rows, origin, default_family, config)
    return problems[: config.limit] if config.limit is not None else problems


def _file_rows(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise ProblemSourceError(f"{path}: no such file")
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            rows = pq.read_table(path).to_pylist()
        else:
            text = path.read_bytes().decode("utf-8")
            if suffix == ".csv":
                rows = list(csv.DictReader(text.splitlines()))
            elif suffix == ".json":
                loaded = json.loads(text)
                if not isinstance(loaded, list):
                    raise ProblemSourceError(f"{path}: expected a JSON list of objects")
                rows = loaded
            else:
                rows = [_json_line(path, n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    except UnicodeDecodeError as err:
        raise ProblemSourceError(f"{path}: not UTF-8 text (byte {err.start})") from None
    except ProblemSourceError:
        raise
    except Exception as err:  # pyarrow / json / OS errors: one message naming the file
        raise ProblemSourceError(f"{path}: unreadable ({type(err).__name__}: {err})") from None
    if not rows:
        raise ProblemSourceError(f"{path}: empty, no problems found")
    return rows


def _json_line(path: Path, number: int, line: str) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise ProblemSourceError(f"{path}: line {number} is not valid JSON ({err.msg})") from None
    if not isinstance(row, dict):
        raise ProblemSourceError(f"{path}: line {number} is not a JSON object")
    return row


def _hf_rows(name: str, split: str) -> list[dict[str, Any]]:
    try:
        import datasets
    except ImportError as err:  # pragma: no cover - datasets is a dependency
        raise ProblemSourceError(f"hf:{name}: the `datasets` package is not installed") from err
    try:
        dataset = datasets.load_dataset(name, split=split)
    except Exception as err:
        raise ProblemSourceError(
            f"hf:{name}: could not load split {split!r} ({type(err).__name__}: {err}). "
            "The dataset must be in the local Hugging Face cache or reachable from this machine."
        ) from None
    rows = dataset.to_list()
    if not rows:
        raise ProblemSourceError(f"hf:{name}: split {split!r} is empty")
    return rows


def _to_problems(rows: list[dict[str, Any]], origin: str, default_family: str, config: ProblemSourceConfig) -> list[Problem]:
    columns = set(rows[0])
    for field, column in (("problem_column", config.problem_column), ("answer_column", config.answer_column)):
        if column not in columns:
            raise ProblemSourceError(
                f"{origin}: missing column {column!r} (set by {field}); columns found: {sorted(columns)}"
            )
    id_column = _optional_column(config.id_column, "id", "id_column", columns, origin)
    family_column = _optional_column(config.data_source_column, "data_source", "data_source_column", columns, origin)
    problems, seen = [], set()
    for index, row in enumerate(rows):
        problem, answer = row.get(config.problem_column), row.get(config.answer_column)
        if problem is None or str(problem).strip() == "":
            raise ProblemSourceError(f"{origin}: row {index}: empty value in column {config.problem_column!r}")
        if answer is None or str(answer).strip() == "":
            raise ProblemSourceError(f"{origin}: row {index}: empty value in column {config.answer_column!r}")
        if config.answer_format != "value":
            answer = answer_in_solution(str(answer), config.answer_format)
            if not answer:
                marker = "a final \\boxed{...}" if config.answer_format == "boxed" else "a `#### answer` line"
                raise ProblemSourceError(
                    f"{origin}: row {index}: no answer in column {config.answer_column!r}: answer_format "
                    f"{config.answer_format!r} expects {marker}"
                )
        pid = str(row[id_column]) if id_column else f"{default_family}:{index}"
        if pid in seen:
            raise ProblemSourceError(f"{origin}: row {index}: duplicate id {pid!r} in column {id_column!r}")
        seen.add(pid)
        family = str(row[family_column]) if family_column else default_family
        problems.append(
            Problem(id=pid, problem=str(problem), answer=str(answer), data_source=family, level=_level(row.get("level")))
        )
    return problems


def _level(value: Any) -> int:
    """A difficulty level column is optional; anything that is not a small integer means unknown (0)."""
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0


def _optional_column(chosen: str | None, default: str, field: str, columns: set[str], origin: str) -> str | None:
    if chosen is None:
        return default if default in columns else None
    if chosen not in columns:
        raise ProblemSourceError(f"{origin}: missing column {chosen!r} (set by {field}); columns found: {sorted(columns)}")
    return chosen


def write_problems(problems: list[Problem], out: Path) -> Path:
    """Write problems as JSONL or Parquet (by suffix), atomically: a temporary file renamed into place."""
    suffix = out.suffix.lower()
    if suffix not in (".jsonl", ".parquet"):
        raise ProblemSourceError(f"{out}: output must end in .jsonl or .parquet")
    from data.fs import write_parquet_atomic, write_text_atomic  # pyarrow only when writing

    rows = [p.to_dict() for p in problems]
    if suffix == ".parquet":
        write_parquet_atomic(out, rows)
    else:
        write_text_atomic(out, "".join(json.dumps(row) + "\n" for row in rows))
    return out
