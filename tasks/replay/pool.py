"""Read an experience pool (Phase I's pool.parquet) into replayable rollouts, keyed by (data_source, problem_id)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq

from data.pool_versions import resolve_pool_file
from data.problem import Problem
from tasks.replay.base import PoolKey, Rollout

REQUIRED_COLUMNS = ("problem_id", "data_source", "prompt", "gold_answer", "response", "response_token_ids", "policy_version")


class PoolError(ValueError):
    """A replay pool that cannot be used; the message names the file."""


def resolve_pool_path(path: Path | None) -> Path:
    if path is None:
        raise PoolError("replay.pool: rlep replay needs a pool (a pool.parquet from `rlep collect`, its run directory, or a pool store)")
    path = resolve_pool_file(path)
    if not path.is_file():
        raise PoolError(f"replay.pool: {path}: no such pool file")
    return path


def load_pool(path: Path | None, problems: dict[PoolKey, Problem] | None = None) -> dict[PoolKey, list[Rollout]]:
    """Pooled answers per (data_source, problem_id).

    With `problems` (the training problems by key), only those problems are kept, at least one must be
    covered, and a pooled row whose problem text or gold answer differs from the training problem's is
    refused: the same key naming another problem would replay answers to a different question.
    """
    path = resolve_pool_path(path)
    try:
        table = pq.read_table(path)
    except Exception as err:
        raise PoolError(f"replay.pool: {path}: unreadable ({type(err).__name__}: {err})") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing:
        raise PoolError(f"replay.pool: {path}: missing columns {missing}")
    pool: dict[PoolKey, list[Rollout]] = defaultdict(list)
    has = set(table.column_names)
    for row in table.to_pylist():
        key = (row["data_source"], row["problem_id"])
        if problems is not None:
            if key not in problems:
                continue
            _check_same_problem(path, row, problems[key])
        if "correct" in has and row["correct"] is False:
            continue
        logprobs = row.get("behaviour_logprobs") or None
        pool[key].append(
            Rollout(
                problem_id=row["problem_id"],
                data_source=row["data_source"],
                prompt=row["prompt"],
                gold_answer=row["gold_answer"],
                response=row["response"],
                response_token_ids=list(row["response_token_ids"] or []),
                policy_version=int(row["policy_version"]),
                behaviour_logprobs=list(logprobs) if logprobs else None,
                reward=row.get("reward"),
                correct=row.get("correct"),
                extracted_answer=row.get("extracted_answer"),
                verdict_reason=row.get("verdict_reason"),
            )
        )
    if problems is not None and not pool:
        raise PoolError(f"replay.pool: {path}: no pooled problem is among the {len(problems)} training problems")
    return dict(pool)


def _check_same_problem(path: Path, row: dict, problem: Problem) -> None:
    where = f"replay.pool: {path}: problem ({row['data_source']!r}, {row['problem_id']!r})"
    if row["gold_answer"] != problem.answer:
        raise PoolError(f"{where} has gold answer {row['gold_answer']!r} in the pool but {problem.answer!r} in training")
    text = row.get("problem")
    if text is not None and text != problem.problem:
        raise PoolError(f"{where} has other problem text in the pool than in training: {text[:60]!r} vs {problem.problem[:60]!r}")
