"""What a collection run holds: counts, accuracy per data source, answer lengths, pool, throughput.

`summarize(path)` accepts a run directory (DIR with `trajectories/`), a trajectories directory (holding
`part-*.parquet`) or one trajectory Parquet file (a shard or a pool), and returns a plain JSON-serialisable
dict; `render(summary)` lays it out as rich tables for a terminal (what `rlep inspect` prints).

Accuracy: for each problem with n sampled answers of which c are correct, mean@n is c / n and pass@k is the
unbiased estimator of data.metrics.pass_at_k; both are averaged over problems. k runs over 1 and the powers
of two up to the smallest n of any problem, so every row reports the same k.

Accepted but not literal: the correct answers to a numeric gold that are neither the gold as written nor a plain
number (`The final answer is 11 + 24` once passed as 35, docs/results.md); accepted but another value: plain numbers
whose exact value is not the gold's (the verifier accepting a wrong answer). The verifier's equivalence is where a
reward hack hides, so these are counted and shown first, for a person to read before the pool is replayed.
"""

from __future__ import annotations

import re
from collections import defaultdict
from functools import cache
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from rich.console import Group
from rich.table import Table
from rich.text import Text

from rlep.data.metrics import ALL_SOURCES, pass_at_k
from rlep.data.run_layout import CollectRunLayout, EvalRunLayout, TrainRunLayout
from rlep.data.store import SHARD_PATTERN, ExperienceStore, StoreError, count_problems, read_trajectory_files
from rlep.data.trajectory import PROBLEM_KEY, check_columns

# A plain number once normalised: an integer, a decimal, a fraction a/b or \frac{a}{b}, with a sign.
_LITERAL = re.compile(r"^[+-]?(?:\d+(?:\.\d+)?|\.\d+|\d+\s*/\s*\d+|\\[dt]?frac\{\d+\}\{\d+\})$")

_EXAMPLE_FIELDS = ("problem_id", "extracted_answer", "gold_answer", "response")

_COLUMNS = [
    "problem_id",
    "data_source",
    "correct",
    "response",
    "response_token_ids",
    "finish_reason",
    "prompt",
    "extracted_answer",
    "gold_answer",
]


def summarize(path: Path | str, sample_rows: int = 3, text_chars: int = 120) -> dict[str, Any]:
    """The summary of the run, trajectories directory or Parquet file at `path`.

    `sample_rows` rows are shown (the first correct one, the first wrong one, then the first others), their
    prompt and response cut to `text_chars` characters. Raises ValueError naming `path` when it is none of
    the accepted kinds, or when a Parquet file does not have the trajectory schema.
    """
    path = Path(path)
    kind, files, store = _resolve(path)
    table = read_trajectory_files(files, _COLUMNS)
    manifest = store.read_manifest() if store is not None else None
    pool = None
    if store is not None and store.pool_path.is_file():
        pool_table = read_trajectory_files([store.pool_path], list(PROBLEM_KEY))
        pool_problems = count_problems(pool_table)
        n_problems = count_problems(table)
        pool = {
            "rows": pool_table.num_rows,
            "problems": pool_problems,
            "problem_share": pool_problems / n_problems if n_problems else None,
            "min_correct": ((manifest or {}).get("pool") or {}).get("min_correct"),
        }
    token_lengths = pc.list_value_length(table["response_token_ids"])
    summary = {
        "path": str(path),
        "kind": kind,
        "files": len(files),
        "problems": count_problems(table),
        "samples": table.num_rows,
        "correct": int(pc.sum(table["correct"].cast(pa.int64())).as_py() or 0),
        "accuracy": accuracy_rows(table),
        "lengths": {
            # Imported rows have no token ids; counting them as zero-length answers would be wrong.
            "tokens": _distribution(pc.filter(token_lengths, pc.greater(token_lengths, 0))),
            "chars": _distribution(pc.utf8_length(table["response"])),
        },
        "finish_reasons": _value_counts(table["finish_reason"]),
        "pool": pool,
        "run": _run_section(manifest, table, token_lengths) if manifest is not None else None,
        "sample_rows": _sample_rows(table, sample_rows, text_chars),
        **{f"accepted_{why}": found for why, found in accepted_against_numbers(table, text_chars=text_chars).items()},
    }
    return summary


def accepted_against_numbers(table: pa.Table, examples: int = 5, text_chars: int = 120) -> dict[str, dict[str, Any]]:
    """The correct answers to a plain-number gold (after the verifier's normalisation) that a person should read:
    `not_literal`, those neither that gold nor a plain number (a restated sum); `other_value`, plain numbers of
    another value than the gold's (the verifier accepting a wrong number, a reward function's worst error). Each:
    the count among the correct answers to a plain-number gold (`of_correct`) and the first `examples`."""
    from rlep.verifiers.fastpath import exact_equal, exact_value  # here: the data layer loads without the verifiers
    from rlep.verifiers.normalize import normalize_answer

    normalized = cache(normalize_answer)  # a problem's gold and answers repeat
    accepted = table.filter(pc.and_(table["correct"], pc.is_valid(table["extracted_answer"])))
    rows = accepted.select(list(_EXAMPLE_FIELDS)).to_pylist()
    numeric_gold = 0
    found: dict[str, list[dict]] = {"not_literal": [], "other_value": []}
    for row in rows:
        gold = normalized(row["gold_answer"])
        if not _LITERAL.match(gold.text):
            continue  # a symbolic gold: its right answers need not be literals
        numeric_gold += 1
        answer = normalized(row["extracted_answer"])
        if answer.text == gold.text:
            continue
        if not _LITERAL.match(answer.text):
            found["not_literal"].append(row)
        elif not gold.approximate:  # an approximate gold (`\\approx 3.14`) is matched by rounding, by design
            # the verifier's exact rule (a percent on one side may be read /100); a value it cannot read is not equal
            values = exact_value(gold.text), exact_value(answer.text)
            if None in values or not exact_equal(gold, values[0], answer, values[1]):
                found["other_value"].append(row)
    return {
        why: {
            "count": len(suspects),
            "of_correct": numeric_gold,
            "examples": [{**row, "response": _truncate(row["response"], text_chars)} for row in suspects[:examples]],
        }
        for why, suspects in found.items()
    }


def accuracy_rows(table: pa.Table) -> list[dict[str, Any]]:
    """mean@n and pass@k per data source plus an `all` row, from `problem_id`, `data_source`, `correct`."""
    if table.num_rows == 0:
        return []
    counts = (
        table.select(["data_source", "problem_id", "correct"])
        .append_column("_c", table["correct"].cast(pa.int64()))
        .group_by(["data_source", "problem_id"], use_threads=False)
        .aggregate([("_c", "sum"), ("_c", "count")])
    )
    groups: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for source, c, n in zip(
        counts["data_source"].to_pylist(), counts["_c_sum"].to_pylist(), counts["_c_count"].to_pylist(), strict=True
    ):
        groups[source].append((n, c))
    everything = [nc for source in sorted(groups) for nc in groups[source]]
    ks = k_values(min(n for n, _ in everything))
    rows = [_accuracy_row(source, groups[source], ks) for source in sorted(groups)]
    rows.append(_accuracy_row(ALL_SOURCES, everything, ks))
    return rows


def k_values(n_min: int) -> list[int]:
    """1, 2, 4, ... up to `n_min` (the smallest per-problem sample count)."""
    ks, k = [], 1
    while k <= n_min:
        ks.append(k)
        k *= 2
    return ks


def render(summary: dict[str, Any]) -> Group:
    """Rich tables for a terminal: overview, accuracy, lengths, pool and throughput, sample rows."""
    parts: list[Any] = []
    # Model output and paths go in as Text: as plain strings rich would read "[...]" in them as markup.
    overview = Table(title=Text(f"{summary['kind']}: {summary['path']}"), show_header=False)
    samples = summary["samples"]
    overview.add_row("files", str(summary["files"]))
    overview.add_row("problems", str(summary["problems"]))
    overview.add_row("samples", str(samples))
    overview.add_row("correct", f"{summary['correct']} ({_pct(summary['correct'] / samples if samples else None)})")
    finish = ", ".join(f"{k}: {v}" for k, v in summary["finish_reasons"].items())
    overview.add_row("finish reasons", finish or "-")
    if summary["pool"] is not None:
        pool = summary["pool"]
        kept = f"{pool['rows']} rows, {pool['problems']} problems ({_pct(pool['problem_share'])} of problems)"
        if pool["min_correct"] is not None:
            kept += f", min_correct={pool['min_correct']}"
        overview.add_row("pool", kept)
    suspects = [
        (summary["accepted_not_literal"], "not a number", "accepted answers that are not a number: check them"),
        (summary["accepted_other_value"], "another number", "accepted numbers of another value than the gold's"),
    ]
    for found, what, _ in suspects:
        if found["of_correct"]:
            count = f"{found['count']} of {found['of_correct']} correct answers to a number (read them)"
            overview.add_row(f"accepted, {what}", count)
    parts.append(overview)
    for found, _, title in suspects:
        if found["examples"]:
            shown = Table(title=title)
            for header in ["problem", "extracted", "gold", "response"]:
                shown.add_column(header)
            for row in found["examples"]:
                shown.add_row(*(Text(str(row[k])) for k in _EXAMPLE_FIELDS))
            parts.append(shown)

    if summary["accuracy"]:
        metrics = [key for key in summary["accuracy"][0] if key.startswith(("mean@", "pass@"))]
        accuracy = Table(title="accuracy per data source (averaged over problems)")
        for header in ["data source", "problems", "samples", *metrics]:
            accuracy.add_column(header, justify="left" if header == "data source" else "right")
        for row in summary["accuracy"]:
            accuracy.add_row(
                Text(row["data_source"]), str(row["problems"]), str(row["samples"]), *(f"{row[m]:.3f}" for m in metrics)
            )
        parts.append(accuracy)

    lengths = Table(title="answer length")
    for header in ["unit", "mean", "p50", "p90", "max"]:
        lengths.add_column(header, justify="left" if header == "unit" else "right")
    for unit, stats in summary["lengths"].items():
        if stats is None:
            lengths.add_row(unit, "-", "-", "-", "-")
        else:
            lengths.add_row(
                unit, f"{stats['mean']:.1f}", f"{stats['p50']:.1f}", f"{stats['p90']:.1f}", str(stats["max"])
            )
    parts.append(lengths)

    run = summary["run"]
    if run is not None:
        timing = Table(title=Text(f"run {run['run_id']} ({run['model']})"))
        for header in ["phase", "seconds", "share"]:
            timing.add_column(header, justify="left" if header == "phase" else "right")
        for phase, seconds in run["phase_seconds"].items():
            timing.add_row(phase, f"{seconds:.2f}", _pct(run["phase_shares"].get(phase)))
        if run["total_seconds"] is not None:
            timing.add_row("total", f"{run['total_seconds']:.2f}", "")
        parts.append(timing)
        rates = ", ".join(f"{name}: {value:.2f}" for name, value in run["throughput"].items() if value is not None)
        parts.append(f"throughput: {rates or '-'}")

    if summary["sample_rows"]:
        rows = Table(title="sample rows")
        for header in ["problem", "source", "ok", "extracted", "gold", "response"]:
            rows.add_column(header)
        for row in summary["sample_rows"]:
            rows.add_row(
                Text(row["problem_id"]),
                Text(row["data_source"]),
                "yes" if row["correct"] else "no",
                Text(str(row["extracted_answer"])),
                Text(row["gold_answer"]),
                Text(row["response"]),
            )
        parts.append(rows)
    return Group(*parts)


# What inspect reads, said when it is given one of our outputs that holds no trajectories.
READS = "`rlep inspect` reads trajectories: a collection run, a training run's fresh/, a pool or a pool store"
# Those outputs, by file name, named when a file so named is not a trajectory table (rather than its columns).
OTHER_TABLES = {
    EvalRunLayout(Path()).eval.name: "an evaluation's scores (avg@k, pass@k and maj@k, by step)",
    EvalRunLayout(Path()).samples.name: "an evaluation's answers with their verdicts",
    TrainRunLayout(Path()).metrics.name: "a training run's metrics, a row per step",
}


def _resolve(path: Path) -> tuple[str, list[Path], ExperienceStore | None]:
    if path.is_dir() and CollectRunLayout(path).trajectories.is_dir():
        store = ExperienceStore(path)
        return "run", store.shard_paths(), store
    if path.is_dir():
        shards = sorted(p for p in path.iterdir() if SHARD_PATTERN.match(p.name))
        if shards:
            return "trajectories", shards, None
    if path.is_file() and path.suffix == ".parquet":
        _refuse_other_tables(path)
        return "file", [path], None
    if not path.exists():
        raise StoreError(f"{path}: no such file or directory")
    training = TrainRunLayout(path)
    if training.config.is_file():  # `rlep train` calls it a run directory too
        raise StoreError(
            f"{str(path)!r} is a training run: `rlep inspect {training.fresh}` reads the answers it "
            "sampled and the replayed ones it trained on (column origin)"
        )
    evaluation = EvalRunLayout(path)
    if evaluation.eval.is_file():
        raise StoreError(
            f"{str(path)!r} is an evaluation run: {evaluation.eval} holds its scores and {evaluation.samples} its "
            f"answers (`rlep eval` printed the scores as it ended); {READS}"
        )
    raise StoreError(
        f"{str(path)!r} is not a run directory (with trajectories/), a trajectories directory "
        "(with part-*.parquet files) or a .parquet file"
    )


def _refuse_other_tables(path: Path) -> None:
    """One of our outputs that holds no trajectories (by its name, once its columns say it is not a trajectory
    table) is named for what it is."""
    what = OTHER_TABLES.get(path.name)
    if what is None:
        return
    try:
        check_columns(pq.read_schema(path).names, str(path))
    except ValueError:
        raise StoreError(f"{path}: {what}, not trajectories; {READS}") from None
    except (OSError, pa.ArrowInvalid):
        return  # unreadable: the reader says so


def _accuracy_row(source: str, groups: list[tuple[int, int]], ks: list[int]) -> dict[str, Any]:
    row: dict[str, Any] = {
        "data_source": source,
        "problems": len(groups),
        "samples": sum(n for n, _ in groups),
        "mean@n": sum(c / n for n, c in groups) / len(groups),
    }
    for k in ks:
        row[f"pass@{k}"] = sum(pass_at_k(n, c, k) for n, c in groups) / len(groups)
    return row


def _distribution(values: pa.Array | pa.ChunkedArray) -> dict[str, float] | None:
    array = np.asarray(values.to_numpy(), dtype=np.float64)
    if array.size == 0:
        return None
    return {
        "mean": float(array.mean()),
        "p50": float(np.percentile(array, 50)),
        "p90": float(np.percentile(array, 90)),
        "max": int(array.max()),
    }


def _value_counts(values: pa.ChunkedArray) -> dict[str, int]:
    counts = pc.value_counts(values)
    pairs = zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True)
    return dict(sorted(pairs, key=lambda pair: (-pair[1], pair[0])))


def _run_section(manifest: dict[str, Any], table: pa.Table, token_lengths: pa.ChunkedArray) -> dict[str, Any]:
    timings = {k: float(v) for k, v in (manifest.get("timings") or {}).items() if isinstance(v, int | float)}
    phases = {k: v for k, v in timings.items() if k != "total"}
    total = timings.get("total", sum(phases.values()) if phases else None)
    problems = count_problems(table)
    tokens = int(pc.sum(token_lengths).as_py() or 0)

    def rate(amount: float, seconds: float | None) -> float | None:
        return amount / seconds if seconds else None

    return {
        "run_id": manifest.get("run_id"),
        "model": (manifest.get("model") or {}).get("id"),
        "weights_hash": (manifest.get("model") or {}).get("weights_hash"),
        "phase_seconds": phases,
        "total_seconds": total,
        "phase_shares": {k: v / total for k, v in phases.items()} if total else {},
        "throughput": {
            "problems/s": rate(problems, total),
            "samples/s": rate(table.num_rows, total),
            "generated tokens/s": rate(tokens, phases.get("generate")),
            "verified answers/s": rate(table.num_rows, phases.get("verify")),
        },
    }


def _sample_rows(table: pa.Table, count: int, text_chars: int) -> list[dict[str, Any]]:
    if count <= 0 or table.num_rows == 0:
        return []
    correct = table["correct"].to_pylist()
    chosen = [i for i in (_first(correct, True), _first(correct, False)) if i is not None][:count]
    others = (i for i in range(table.num_rows) if i not in chosen)
    chosen += list(islice(others, count - len(chosen)))
    rows = table.take(sorted(chosen)).select(
        ["problem_id", "data_source", "correct", "extracted_answer", "gold_answer", "prompt", "response"]
    )
    out = rows.to_pylist()
    for row in out:
        row["prompt"] = _truncate(row["prompt"], text_chars)
        row["response"] = _truncate(row["response"], text_chars)
    return out


def _first(values: list[bool], wanted: bool) -> int | None:
    return next((i for i, v in enumerate(values) if v is wanted), None)


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.1f}%"
