"""Build the replay strategy a config names (strategies.DESIGNS, by `kind`), with what its design declares it
needs. A pool is read here (data.pool.read_pool), checked before the run, matched to the training problems by
(data_source, problem_id), pinned to one version, and its coverage reported."""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

from data.pool import PoolError, read_pool, resolve_pool_path
from data.problem import Problem
from data.rollout import PoolKey, Rollout
from tasks.replay.base import ReplayNeeds, ReplayStrategy
from tasks.replay.strategies import DESIGNS

LOW_COVERAGE = 0.2  # below this share of training problems with a pooled answer, training warns


def needs(config) -> ReplayNeeds:
    """What the design `config` names needs from the run (its class's declaration)."""
    return DESIGNS[config.kind].needs


def check_inputs(config) -> None:
    """Fail now, before any model is loaded, when the design's inputs are missing (a pool that is not there)."""
    if needs(config).pool:
        resolve_pool_path(config.pool)


def pinned(config):
    """`config` with a pool given as a store or a directory replaced by the file it resolves to now.

    A run records the pinned path in its saved settings, so `--resume` replays the same pool version even
    after a newer one is published to the store.
    """
    if needs(config).pool and config.pool is not None:
        path = resolve_pool_path(Path(config.pool))
        if path != Path(config.pool):
            return config.model_copy(update={"pool": path})
    return config


def make_replay(config, seed: int = 0, problems: dict[PoolKey, Problem] | None = None) -> ReplayStrategy:
    """The strategy for `config`; `problems` (the training problems by key) lets a pool be checked against them."""
    design = DESIGNS[config.kind]
    if not design.needs.pool:
        return design(config, seed=seed)
    replay = design(config, load_pool(config.pool, problems), seed=seed)
    if problems:
        replay.coverage = len(replay.pool) / len(problems)
        print(f"replay pool {config.pool}: answers for {len(replay.pool)} of {len(problems)} training problems ({replay.coverage:.0%})")
        if replay.coverage < LOW_COVERAGE:
            print(f"warning: replay pool {config.pool} covers only {replay.coverage:.0%} of the training problems: most groups "
                  "will replay nothing (see replay_prompt_share in metrics.parquet)", file=sys.stderr)  # fmt: skip
    return replay


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
        raise PoolError(f"{where} has gold answer {row['gold_answer']!r} in the pool but {problem.answer!r} in training")
    if row["problem"] != problem.problem:
        raise PoolError(f"{where} has other problem text in the pool than in training: {row['problem'][:60]!r} vs {problem.problem[:60]!r}")
