"""The experience pool in the RLEP / verl Parquet layout, and back.

verl's RL datasets (verl `docs/preparation/prepare_data.rst`, `examples/data_preprocess/*.py`) hold one
row per problem with five columns: `data_source` (it picks the scorer in verl's `default_compute_score`),
`prompt` (a chat: a list of {"role", "content"}), `ability`, `reward_model` = {"style", "ground_truth"} and
`extra_info` (free-form; verl reads `index`). RLEP (Kwai-Klear/RLEP, a verl fork) keeps its experience pool
inside that same training file: `reward_model["candidates"]` is the list of verified-correct response texts
of the problem (its `verl/utils/dataset/rl_dataset.py` reads it when `data.with_experience_replay` is on,
samples `data.experience_replay_num` of them per step and re-tokenises each as `encode(text) + [eos]`; a
null list counts as empty). The released `dapo-math-17k-with-experience-pool.parquet` is that layout, and
RLEP re-scores replayed answers with the row's scorer like fresh ones.

Export, three ways:

- Into a training file (`into=`, what RLEP's recipe trains on): every row of that file, in its order, with
  its own columns and types (a string `extra_info.index` stays a string), gets `reward_model.candidates`:
  the pool's answers to that problem, or an empty list for a problem the pool did not solve. A pool
  problem is that row's by data.verl_rows' rule (its id is the row's `extra_info.index` as text, else the
  same problem text). `data_source` stays the file's unless `data_source=` names a scorer for every row.
  `datasets.concatenate_datasets` with the original file works (struct fields it lacks read as null).
- Standalone, from the source's rows (`fields="source"`, the default): a pool collected from a verl
  Parquet file (DAPO-Math-17k, verl's preprocessed files), found through the pool's manifest or lineage
  (data.pool_origin), is written as that file's rows of the pool's problems, in pool order, with the same
  columns, types and values (a UUID `extra_info.index`, `ability` "MATH", `reward_model.style`) and
  `reward_model.candidates`: rows that can be appended to the training file.
- Standalone in rlep's layout, when the pool's problems have no verl file (tiny-math, a columns file), the
  file is not found, or not all of the pool's problems are its rows (`note` says why), or `fields="rlep"`:
  one row per pool problem, in pool order:

    data_source   `data_source=`, else the pool's when verl has a scorer for it, else DEFAULT_SCORER
    prompt        [{"role": "user", "content": <question>}] (`prompt="raw"`: verl applies the chat
                  template itself) or <the prompt the answers were sampled from> (`prompt="rendered"`)
    ability       "math"
    reward_model  {"style": "rule", "ground_truth": <gold_answer>, "candidates": [<response>, ...]}
    extra_info    {"index": <row number>, "problem_id", "problem": <question>, "level",
                   "rlep_data_source": <the pool's data_source>}

Strict re-check (`strict=True`): each candidate is verified again with the verifier's `answer_format:
boxed` mode (the last \boxed{} only, no last-number fallback, and verl's MATH string check), so that
every exported candidate scores 1.0 under verl's MATH scorer; a lenient pass such as `6}` for gold `6`
is dropped and counted. Rows whose scorer reads another answer format (`openai/gsm8k` reads `#### N`,
`math_dapo` an `Answer:` line) cannot be vouched for: under strict their candidates are dropped and
counted too (name a boxed scorer with `data_source=` if the answers are boxed).

Import, the way back into rlep's trajectory schema, is data/rlep_import.py's (round trip: export -> import
-> export gives an identical table).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from rlep.data.fs import write_parquet_atomic
from rlep.data.pool import resolve_pool_path
from rlep.data.pool_origin import PoolOrigin, pool_origin
from rlep.data.rlep_import import import_pool
from rlep.data.store import StoreError, read_trajectory_files
from rlep.data.verl_rows import read_verl, rows_of, with_candidates

# `import_pool` is importable from here too: `rlep pool import` (flows/commands/pools.py) names it here.
__all__ = ["RLEP_SCHEMA", "ExportReport", "export_pool", "import_pool", "known_scorer"]

ABILITY = "math"
REWARD_STYLE = "rule"

# Scorers of verl's `default_compute_score` (verl/utils/reward_score/__init__.py, read 2026-01) by the
# answer format they read. Boxed: `math_reward` (last \boxed{}, MATH string normalisation).
BOXED_SCORERS = ("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500")
OTHER_SCORERS = (
    "openai/gsm8k",  # `#### N`
    "math_dapo",
    "math",
    "math_dapo_reasoning",  # `Answer: ...` line (and data sources starting with `aime`)
    "numina_aops_forum",
    "numina_synthetic_math",
    "numina_amc_aime",
    "numina_synthetic_amc",
    "numina_cn_k12",
    "numina_olympiads",  # prime_math
)
DEFAULT_SCORER = "lighteval/MATH"  # rlep's default prompt asks for \boxed{}, which this scorer reads

RLEP_SCHEMA = pa.schema(
    [
        pa.field("data_source", pa.string()),
        pa.field("prompt", pa.list_(pa.struct([pa.field("role", pa.string()), pa.field("content", pa.string())]))),
        pa.field("ability", pa.string()),
        pa.field(
            "reward_model",
            pa.struct(
                [
                    pa.field("style", pa.string()),
                    pa.field("ground_truth", pa.string()),
                    pa.field("candidates", pa.list_(pa.string())),
                ]
            ),
        ),
        pa.field(
            "extra_info",
            pa.struct(
                [
                    pa.field("index", pa.int64()),
                    pa.field("problem_id", pa.string()),
                    pa.field("problem", pa.string()),
                    pa.field("level", pa.int32()),
                    pa.field("rlep_data_source", pa.string()),
                ]
            ),
        ),
    ]
)


def known_scorer(data_source: str) -> bool:
    """Whether verl's `default_compute_score` has a math scorer for `data_source`."""
    return data_source in BOXED_SCORERS or data_source in OTHER_SCORERS or data_source.startswith("aime")


@dataclass
class ExportReport:
    """What an export wrote and left out."""

    path: Path
    rows: int  # rows written
    rows_with_candidates: int
    candidates: int  # answers written
    pool_problems: int
    unmatched_pool_problems: int  # into a training file: pool problems none of its rows is
    strict_dropped: int = 0  # answers the strict re-check refused (wrong under verl's boxed scorer)
    strict_other_format: int = 0  # answers dropped under strict because their row's scorer reads another format
    data_sources: dict[str, str] = field(default_factory=dict)  # pool data_source -> written data_source
    layout: Literal["into", "source", "rlep"] = "rlep"  # the rows of `into`, of the pool's source file, or rlep's
    source: Path | None = None  # the verl file whose rows were written
    note: str | None = None  # why a standalone export is in rlep's layout though the pool's problems have a file

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "path": str(self.path), "source": self.source and str(self.source)}


def _pool_problems(pool_path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """The pool's problems in order of first appearance, each with its answers in pool order. Raises
    StoreError when one problem carries two different gold answers (two versions of a dataset mixed)."""
    pool = read_trajectory_files(
        [Path(pool_path)], ["problem_id", "data_source", "prompt", "problem", "gold_answer", "level", "response"]
    )
    problems: dict[tuple[str, str], dict[str, Any]] = {}
    for row in pool.to_pylist():
        key = (row["data_source"], row["problem_id"])
        entry = problems.setdefault(key, {**row, "candidates": []})
        if entry["gold_answer"] != row["gold_answer"]:
            raise StoreError(
                f"{pool_path}: problem {row['problem_id']!r} of {row['data_source']!r} has two gold answers "
                f"({entry['gold_answer']!r} and {row['gold_answer']!r})"
            )
        entry["candidates"].append(row["response"])
    return problems


def _strict_filter(
    problems: dict[tuple[str, str], dict[str, Any]], scorer_of: dict[tuple[str, str], str], verifier: Any
) -> tuple[int, int]:
    """Keep, per problem, only the answers verl's scorer for its row will score 1: returns (refused by the
    boxed re-check, dropped because the row's scorer reads another format)."""
    from rlep.tasks.settings.verifier import VerifierConfig
    from rlep.verifiers import verify_batch  # the verifier's strict mode; data stays free of it otherwise

    base = verifier if verifier is not None else VerifierConfig()
    strict = base.model_copy(update={"answer_format": "boxed", "fallback_last_number": False})
    other, pairs = 0, []
    for key, entry in problems.items():
        if scorer_of[key] in BOXED_SCORERS:
            pairs += [(key, c) for c in entry["candidates"]]
        else:
            other += len(entry["candidates"])
            entry["candidates"] = []
    verdicts = verify_batch([c for _, c in pairs], [problems[k]["gold_answer"] for k, _ in pairs], config=strict)
    kept: dict[tuple[str, str], list[str]] = {key: [] for key, _ in pairs}
    for (key, candidate), verdict in zip(pairs, verdicts, strict=True):
        if verdict.correct:
            kept[key].append(candidate)
    for key, candidates in kept.items():
        problems[key]["candidates"] = candidates
    return len(pairs) - sum(map(len, kept.values())), other


def export_pool(
    pool_path: Path | str,
    out_path: Path | str,
    *,
    into: Path | str | None = None,
    data_source: str | None = None,
    prompt: Literal["raw", "rendered"] = "raw",
    fields: Literal["source", "rlep"] = "source",
    strict: bool = False,
    verifier: Any = None,
) -> ExportReport:
    """Write the pool `pool_path` names (a pool file, a collection run or version directory, or a pool store:
    data.pool.resolve_pool_file) as an RLEP/verl training file at `out_path`.

    `into`: a verl training file to merge into (see the module docstring); otherwise a standalone file, of
    the rows of the verl file the pool was collected from (`fields="source"`, when data.pool_origin finds
    it) or in rlep's layout. `data_source`: the scorer name written on every row. `prompt` (standalone
    only): the raw question or the prompt the answers were sampled from. `strict`: re-check every answer
    in the verifier's boxed mode (`verifier` gives the other verifier settings). Raises StoreError naming
    the file on a pool or training file that cannot be used.
    """
    if data_source is not None and not known_scorer(data_source):
        raise StoreError(
            f"data_source {data_source!r}: verl's default_compute_score has no scorer of that name "
            f"(boxed answers: {', '.join(BOXED_SCORERS)})"
        )
    pool_file = resolve_pool_path(pool_path, setting="pool")  # export's POOL argument
    problems = _pool_problems(pool_file)
    if into is not None:
        into = Path(into)
        return _export_onto(problems, read_verl(into), into, Path(out_path), data_source, strict, verifier)
    origin = pool_origin(pool_file) if fields == "source" else PoolOrigin(None)
    note = origin.note
    if origin.file is not None and origin.file.suffix.lower() == ".parquet":
        table = pq.read_table(origin.file)
        if {"data_source", "prompt", "reward_model"} <= set(table.column_names):  # else no verl fields to keep
            onto = (problems, table, origin.file, Path(out_path), data_source, strict, verifier)
            report = _export_onto(*onto, pool_rows=True, prompt=prompt)
            if report.unmatched_pool_problems == 0:
                return report
            note = f"{report.unmatched_pool_problems} of its problems are not rows of {origin.file}"
    written = {}
    for key in problems:
        source = key[0]
        written[key] = data_source or (source if known_scorer(source) else DEFAULT_SCORER)
    dropped = _strict_filter(problems, written, verifier) if strict else (0, 0)
    rows = []
    for key, entry in problems.items():
        content = entry["problem"] if prompt == "raw" else entry["prompt"]
        rows.append(
            {
                "data_source": written[key],
                "prompt": [{"role": "user", "content": content}],
                "ability": ABILITY,
                "reward_model": {
                    "style": REWARD_STYLE,
                    "ground_truth": entry["gold_answer"],
                    "candidates": entry["candidates"],
                },
                "extra_info": {
                    "index": len(rows),
                    "problem_id": entry["problem_id"],
                    "problem": entry["problem"],
                    "level": entry["level"],
                    "rlep_data_source": entry["data_source"],
                },
            }
        )
    path = write_parquet_atomic(Path(out_path), pa.Table.from_pylist(rows, schema=RLEP_SCHEMA))
    return ExportReport(
        path=path,
        rows=len(rows),
        rows_with_candidates=sum(bool(r["reward_model"]["candidates"]) for r in rows),
        candidates=sum(len(r["reward_model"]["candidates"]) for r in rows),
        pool_problems=len(problems),
        unmatched_pool_problems=0,
        strict_dropped=dropped[0],
        strict_other_format=dropped[1],
        data_sources={k[0]: v for k, v in written.items()},
        note=note,
    )


def _export_onto(
    problems,
    table: pa.Table,
    file: Path,
    out_path: Path,
    data_source: str | None,
    strict: bool,
    verifier: Any,
    pool_rows: bool = False,
    prompt: Literal["raw", "rendered"] = "raw",
) -> ExportReport:
    """The pool's answers on the rows of verl file `file` (read as `table`): every row in its order (`into`), or
    with `pool_rows` only the pool's problems' rows, in pool order (nothing written unless all are rows)."""
    records = table.to_pylist()
    row_of = rows_of(problems, records, file)
    unmatched = len(problems) - len(row_of)
    numbers = list(dict.fromkeys(row_of.values())) if pool_rows else range(len(records))
    if pool_rows and unmatched:  # nothing written, nothing filtered: the caller writes rlep's layout instead
        return ExportReport(out_path, 0, 0, 0, len(problems), unmatched)
    matched = {k: problems[k] for k in row_of}
    scorer_of = {k: data_source or records[n]["data_source"] for k, n in row_of.items()}
    dropped = _strict_filter(matched, scorer_of, verifier) if strict else (0, 0)
    candidates: dict[int, list[str]] = {}
    for key, number in row_of.items():
        candidates.setdefault(number, []).extend(matched[key]["candidates"])
        if prompt == "rendered":
            records[number]["prompt"] = [{"role": "user", "content": matched[key]["prompt"]}]
    for number in numbers:
        record = records[number]
        record["reward_model"] = {**(record["reward_model"] or {}), "candidates": candidates.get(number, [])}
        if data_source is not None:
            record["data_source"] = data_source
    out = pa.Table.from_pylist([records[n] for n in numbers], schema=with_candidates(table.schema))
    return ExportReport(
        path=write_parquet_atomic(out_path, out),
        rows=out.num_rows,
        rows_with_candidates=sum(bool(c) for c in candidates.values()),
        candidates=sum(map(len, candidates.values())),
        pool_problems=len(problems),
        unmatched_pool_problems=unmatched,
        strict_dropped=dropped[0],
        strict_other_format=dropped[1],
        data_sources={k[0]: v for k, v in scorer_of.items()},
        layout="source" if pool_rows else "into",
        source=file,
    )
