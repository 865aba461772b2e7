"""Reading a pool for replay: its answers as replay rollouts, checked against the training problems, and
`PoolSource`, the pool store a run follows (`replay.follow`), one version at a time."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from rlep.data.pool import PoolError, PoolStore, read_pool
from rlep.data.problem import Problem
from rlep.data.rollout import PoolKey, Rollout


def load_pool(path: Path | None, problems: dict[PoolKey, Problem] | None = None) -> dict[PoolKey, list[Rollout]]:
    """Pooled correct answers per (data_source, problem_id), as replay rollouts.

    With `problems` (the training problems by key), only those problems are kept, at least one must be
    covered, and a pooled row whose problem text or gold answer differs from the training problem's is
    refused: the same key naming another problem would replay answers to a different question.
    """
    file, table = read_pool(path)
    pool: dict[PoolKey, list[Rollout]] = defaultdict(list)
    for row in table.to_pylist():
        key = (row["data_source"], row["problem_id"])
        if problems is not None:
            if key not in problems:
                continue
            _check_same_problem(file, row, problems[key])
        if row["correct"]:
            pool[key].append(Rollout.from_row({**row, "origin": "replay"}))
    if problems is not None and not pool:
        raise PoolError(f"replay.pool: {file}: no pooled problem is among the {len(problems)} training problems")
    return dict(pool)


def _check_same_problem(path: Path, row: dict, problem: Problem) -> None:
    where = f"replay.pool: {path}: problem ({row['data_source']!r}, {row['problem_id']!r})"
    if row["gold_answer"] != problem.answer:
        raise PoolError(
            f"{where} has gold answer {row['gold_answer']!r} in the pool but {problem.answer!r} in training"
        )
    if row["problem"] != problem.problem:
        raise PoolError(
            f"{where} has other problem text in the pool than in training: {row['problem'][:60]!r} vs "
            f"{problem.problem[:60]!r}"
        )


class PoolSource:
    """A pool store followed by a training run: its newest version number, and any version's answers loaded
    for the run's training problems."""

    def __init__(self, root: Path | str, problems: dict[PoolKey, Problem] | None = None) -> None:
        self.root = Path(root)
        self.store = PoolStore(self.root)
        self.problems = problems
        if not self.store.versions():
            raise PoolError(
                f"replay.pool: {self.root}: replay.follow needs a pool store (directories v0001, v0002, ... "
                "published by `rlep recollect` or the recollect deployment); none is there"
            )

    def latest(self) -> int:
        return self.store.versions()[-1]

    def load(self, version: int) -> dict[PoolKey, list[Rollout]]:
        return load_pool(self.store.version_file(version), self.problems)

    def coverage(self, pool: dict[PoolKey, list[Rollout]]) -> float:
        return len(pool) / len(self.problems) if self.problems else float("nan")
