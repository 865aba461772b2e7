"""A study's finished runs gathered as tables, with the cost each arm is charged (runs execute in `tasks.execute`)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from rlep.data.metrics import ALL_SOURCES
from rlep.data.run_layout import TrainRunLayout
from rlep.tasks.plan import Run
from rlep.tasks.study.plan import StudyError


def run_cost(run: Run) -> dict[str, float]:
    """What a finished run cost on its own: `tokens_generated` and `seconds` (a training run's step seconds,
    evaluation excluded; a collection's total wall time)."""
    out = Path(run.config.out)
    if run.kind == "collect":
        from rlep.tasks.collect import collection_cost

        return collection_cost(out)
    # A run that others need is an exploration or a collection, never a living-pool arm: its re-collections are
    # charged where it is gathered (`gather`), from the step each was paid on.
    metrics = pd.read_parquet(TrainRunLayout(out).metrics, columns=["step", "tokens_generated_total", "time_step"])
    return {"tokens_generated": float(metrics.tokens_generated_total.max()), "seconds": float(metrics.time_step.sum())}


def _refreshes(run: Run) -> list[tuple[int, dict[str, float]]]:
    """A living-pool arm's re-collections: (the step each followed, its cost); none for any other run."""
    if run.living is None:
        return []
    from rlep.tasks.living_pool import refresh_costs

    return refresh_costs(run.living.store)


def dependency_cost(run: Run, by_key: dict[str, Run]) -> dict[str, float]:
    """The full cost of every run `run` depends on, directly or not (RLEP: its exploration and its collection),
    each counted once. Shared runs are charged in full to each dependent arm: the honest default, since the arm
    could not exist without them."""
    seen: set[str] = set()
    todo = list(run.needs)
    total = {"tokens_generated": 0.0, "seconds": 0.0}
    while todo:
        key = todo.pop()
        if key in seen:
            continue
        seen.add(key)
        try:
            cost = run_cost(by_key[key])
        except FileNotFoundError as err:
            raise StudyError(f"{run.key} depends on {key}, which has not finished: {err}") from None
        for name in total:
            total[name] += cost[name]
        todo.extend(by_key[key].needs)
    return total


def gather(runs: list[Run], only: set[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per evaluation step, final evaluation) tables over every arm run of the plan `runs` (`only`: those keys;
    the runs they depend on are looked up in the whole plan).

    Per step: arm, seed, step, accuracy (held-out avg@k of the training run's evaluation), tokens_generated
    (generated so far by the run), wall_seconds (its training seconds so far, evaluation excluded),
    tokens_charged / seconds_charged (the same plus the full cost of the runs it depends on, and of a living-pool
    arm's re-collections from the step after each), optimizer_updates, tokens_trained and replayed (rows trained
    as replayed: what makes a replay arm differ from plain GRPO) so far. Final: arm, seed, k, avg_at_k,
    pass_at_k, maj_at_k of the final evaluation.
    """
    by_key = {run.key: run for run in runs}
    steps, finals = [], []
    for run in runs:
        if run.kind != "train" or run.arm is None or run.continues:  # a living-pool arm: its first part stands for it
            continue
        if only is not None and run.key not in only:
            continue
        out = Path(run.config.out)
        layout = TrainRunLayout(out)
        ev = pd.read_parquet(layout.eval)
        ev = ev[ev.data_source == ALL_SOURCES][["step", "avg_at_k"]]
        metrics = pd.read_parquet(layout.metrics).sort_values("step")
        for path, table in ((layout.eval, ev), (layout.metrics, metrics)):
            if table.step.duplicated().any():  # a run directory written to by two runs, or edited by hand
                twice = sorted(set(table.step[table.step.duplicated()].astype(int)))
                raise StudyError(
                    f"{path}: step {', '.join(map(str, twice))} recorded twice in run {run.key}; one run writes "
                    "each step once (a resumed run rewinds to its checkpoint first): move the directory away and "
                    "run it again"
                )
        charged = dependency_cost(run, by_key)
        progress = pd.DataFrame(
            {
                "step": [0, *metrics.step],
                "tokens_generated": [0, *metrics.tokens_generated_total],
                "wall_seconds": [0.0, *metrics.time_step.cumsum()],
                "optimizer_updates": [0, *metrics.optimizer_updates.cumsum()]
                if "optimizer_updates" in metrics
                else math.nan,
                "tokens_trained": [0, *metrics.tokens_trained.cumsum()] if "tokens_trained" in metrics else math.nan,
                "replayed": [0, *metrics.replay_rows.cumsum()] if "replay_rows" in metrics else math.nan,
            }
        )
        progress["tokens_charged"] = progress.tokens_generated + charged["tokens_generated"]
        progress["seconds_charged"] = progress.wall_seconds + charged["seconds"]
        for after_step, refresh in _refreshes(run):  # paid before step after_step + 1 trained
            paid = progress.step > after_step
            progress.loc[paid, "tokens_charged"] += refresh["tokens_generated"]
            progress.loc[paid, "seconds_charged"] += refresh["seconds"]
        rows = ev.merge(progress, on="step", how="left").rename(columns={"avg_at_k": "accuracy"})
        steps.append(rows.assign(arm=run.arm, seed=run.seed))
        final = layout.final_eval.eval
        if final.is_file():
            fe = pd.read_parquet(final)
            fe = fe[fe.data_source == ALL_SOURCES][["k", "avg_at_k", "pass_at_k", "maj_at_k"]]
            finals.append(fe.assign(arm=run.arm, seed=run.seed))
    columns = [
        "arm",
        "seed",
        "step",
        "accuracy",
        "tokens_generated",
        "tokens_charged",
        "wall_seconds",
        "seconds_charged",
        "optimizer_updates",
        "tokens_trained",
        "replayed",
    ]
    if not steps:
        raise StudyError("no arm's training run to gather: the study has none finished")
    study = pd.concat(steps, ignore_index=True)[columns]
    final = (
        pd.concat(finals, ignore_index=True)
        if finals
        else pd.DataFrame(columns=["arm", "seed", "k", "avg_at_k", "pass_at_k", "maj_at_k"])
    )
    return study.sort_values(["arm", "seed", "step"], ignore_index=True), final
