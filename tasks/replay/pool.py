"""Read an experience pool (Phase I's pool.parquet) into replayable rollouts, keyed by problem id."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq

from data.pool_versions import resolve_pool_file
from tasks.replay.base import Rollout

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


def load_pool(path: Path | None, problem_ids: set[str] | None = None) -> dict[str, list[Rollout]]:
    """Pooled answers per problem id; with `problem_ids`, only those problems (and at least one of them)."""
    path = resolve_pool_path(path)
    try:
        table = pq.read_table(path)
    except Exception as err:
        raise PoolError(f"replay.pool: {path}: unreadable ({type(err).__name__}: {err})") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing:
        raise PoolError(f"replay.pool: {path}: missing columns {missing}")
    pool: dict[str, list[Rollout]] = defaultdict(list)
    has = set(table.column_names)
    for row in table.to_pylist():
        if problem_ids is not None and row["problem_id"] not in problem_ids:
            continue
        if "correct" in has and row["correct"] is False:
            continue
        logprobs = row.get("behaviour_logprobs") or None
        pool[row["problem_id"]].append(
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
    if problem_ids is not None and not pool:
        raise PoolError(f"replay.pool: {path}: no pooled problem is among the {len(problem_ids)} training problems")
    return dict(pool)
