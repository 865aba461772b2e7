"""Whether each chance-control run was its baseline, step for step, until it re-seeded (`perturb: {reseed_at: R}`).

The control reruns the baseline's steps 1 to R-1 rather than branching from its checkpoint (docs/study.md). On the
CPU those steps come out the same, every value; on a GPU a nondeterministic kernel can part the two runs before R,
and then a claim against the control compares runs that differed before the change it controls for. The report
reads both runs' metrics.parquet (every column but wall-clock times) and eval.parquet before R, seed by seed, and
says where they parted, if they did, so nobody has to compare the files by hand.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from rlep.data.run_layout import StudyLayout, TrainRunLayout
from rlep.tasks.settings.study import StudyConfig

CONTROL_COLUMNS = [
    "control",
    "baseline",
    "seed",
    "reseed_at",
    "steps_compared",  # training steps before R found in both runs' metrics
    "evals_compared",  # evaluation steps before R found in both runs' eval.parquet
    "parted_at",  # the first step before R at which a value differs; -1 where none does
    "parted_in",  # the first column that differs there (`evaluation avg_at_k (all)` for an evaluation)
    "control_value",
    "baseline_value",
    "complete",  # both runs have every step 1..R-1: the comparison covers the whole branch
]
EVAL_VALUES = ["avg_at_k", "pass_at_k", "maj_at_k"]


def control_arms(config: StudyConfig) -> list[tuple[str, str | None, int]]:
    """(control arm, its baseline arm, R) for every arm with `perturb`: the baseline is the arm whose resolved
    settings are the control's without `perturb` (None when no arm is)."""
    order = sorted(config.arms, key=lambda arm: (arm != config.baseline_arm, arm))  # the reference arm first
    resolved = {arm: config.arm_settings(arm) for arm in order}
    found = []
    for arm, settings in resolved.items():
        if not settings.get("perturb"):
            continue
        bare = {**settings, "perturb": None}
        baseline = next(
            (a for a, s in resolved.items() if not s.get("perturb") and {**s, "perturb": None} == bare), None
        )
        found.append((arm, baseline, int(settings["perturb"]["reseed_at"])))
    return found


def _same(a, b) -> bool:
    """Equal, or both missing (NaN): a column a step does not fill, as replay's in a run without it."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def compare_before(baseline: Path | str, control: Path | str, reseed_at: int) -> dict:
    """How the runs in `baseline` and `control` compare at the steps before `reseed_at`: the first difference in
    their metrics (steps 1..R-1, every column but wall-clock ones) or evaluations (steps 0..R-1: avg@k, pass@k
    and maj@k of every data source), in step order, a training step before the evaluation of the same step."""
    runs = [TrainRunLayout(baseline), TrainRunLayout(control)]
    metrics = [pd.read_parquet(r.metrics).set_index("step") for r in runs]
    evals = [pd.read_parquet(r.eval).set_index(["step", "data_source"]) for r in runs]
    columns = [c for c in metrics[0] if c in metrics[1] and not c.startswith("time_") and c != "seconds_total"]
    steps = sorted(s for s in set(metrics[0].index) & set(metrics[1].index) if s < reseed_at)
    evaluated = sorted(k for k in set(evals[0].index) & set(evals[1].index) if k[0] < reseed_at)
    found = {
        "steps_compared": len(steps),
        "evals_compared": len({step for step, _ in evaluated}),
        "parted_at": -1,
        "parted_in": "",
        "control_value": math.nan,
        "baseline_value": math.nan,
        "complete": steps == list(range(1, reseed_at)),
    }
    for step in range(reseed_at):  # in step order: a training step, then the evaluation of its weights
        keys = [(step, None)] if step in steps else []
        keys += [key for key in evaluated if key[0] == step]
        for key in keys:
            table, names = (metrics, columns) if key[1] is None else (evals, EVAL_VALUES)
            index = step if key[1] is None else key
            for name in names:
                if name not in table[0] or name not in table[1]:
                    continue
                base, mine = table[0].at[index, name], table[1].at[index, name]
                if not _same(base, mine):
                    where = name if key[1] is None else f"evaluation {name} ({key[1]})"
                    return {
                        **found,
                        "parted_at": step,
                        "parted_in": where,
                        "control_value": float(mine),
                        "baseline_value": float(base),
                    }
    return found


def control_check(config: StudyConfig) -> pd.DataFrame:
    """One row per control arm and seed whose run and its baseline's have metrics and evaluations
    (`compare_before`); none for a control with no baseline arm or runs not started."""
    layout = StudyLayout(config.out)
    rows = []
    for arm, baseline, reseed_at in control_arms(config):
        if baseline is None:
            continue
        for seed in config.seeds:
            dirs = [TrainRunLayout(layout.run(a, seed)) for a in (baseline, arm)]
            if not all(d.metrics.is_file() and d.eval.is_file() for d in dirs):
                continue
            found = compare_before(dirs[0].root, dirs[1].root, reseed_at)
            rows.append({"control": arm, "baseline": baseline, "seed": seed, "reseed_at": reseed_at, **found})
    return pd.DataFrame(rows, columns=CONTROL_COLUMNS)


def control_markdown(config: StudyConfig, table: pd.DataFrame) -> str | None:
    """The report's section on each control arm: seed by seed, the same as its baseline before R or where they
    parted. None when the study has no control arm."""
    arms = control_arms(config)
    if not arms:
        return None
    lines = []
    for arm, baseline, reseed_at in arms:
        if baseline is None:
            lines += [
                f"- `{arm}` re-seeds from step {reseed_at}, but no arm has its settings without `perturb`: there is "
                "no baseline run to compare it with.",
            ]
            continue
        lines += [f"- `{arm}` is `{baseline}` re-seeded from step {reseed_at}:"]
        rows = table[table.control == arm]
        if rows.empty:
            lines += ["  - no seed has both runs started yet."]
        for row in rows.itertuples(index=False):
            covered = (
                f"steps 1-{reseed_at - 1}" if row.complete else f"{row.steps_compared} of its {reseed_at - 1} steps"
            )
            if row.parted_at < 0:
                lines += [
                    f"  - seed {row.seed}: the same at {covered} (every metric but wall-clock times) and at "
                    f"{row.evals_compared} evaluation(s) before step {reseed_at}"
                    + ("." if row.complete else "; the rest is not run yet.")
                ]
            else:
                lines += [
                    f"  - seed {row.seed}: **parted at step {row.parted_at}**, before its re-seed step: "
                    f"{row.parted_in} {row.control_value:.6g} against {row.baseline_value:.6g}."
                ]
    parted = table[table.parted_at >= 0]
    lines += [""]
    if len(parted):
        lines += [
            f"{len(parted)} control run(s) parted from their baseline before re-seeding (a nondeterministic kernel, "
            "or runs made by different code or machines): a claim against the control compares, at those seeds, "
            "runs that differed before the change it controls for.",
        ]
    else:
        lines += [
            "Where a seed is listed as the same, the control is its baseline up to its re-seed step, so a claim "
            "against it measures what re-sampling the rest of the run changes.",
        ]
    return "\n".join(lines) + "\n"
