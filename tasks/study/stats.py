"""Statistics of a study: bootstrap intervals over seeds, paired differences to the baseline, and the claims.

Seeds are the unit of resampling: a seed is one whole training run, and runs of the same seed in two arms
share their prompt order and sampling seeds, so differences are taken per seed before resampling (a paired
bootstrap). Intervals are 95% percentile intervals; with one seed there is no interval (NaN).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

LEVEL = 0.95


def bootstrap_mean(values, n_boot: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """(mean, low, high) of `values` with a percentile bootstrap interval of the mean."""
    values = np.asarray(values, dtype=float)
    mean = float(values.mean()) if len(values) else math.nan
    if len(values) < 2:
        return mean, math.nan, math.nan
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(n_boot, len(values)))].mean(axis=1)
    low, high = np.quantile(means, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    return mean, float(low), float(high)


def summarize(study: pd.DataFrame, baseline: str, n_boot: int = 2000) -> pd.DataFrame:
    """One row per (arm, step): n_seeds, mean accuracy with its interval, the paired difference to `baseline`
    with its interval, and the mean tokens generated and training seconds at that step."""
    reference = study[study.arm == baseline].set_index(["seed", "step"]).accuracy
    rows = []
    for (arm, step), group in study.groupby(["arm", "step"], sort=True):
        mean, low, high = bootstrap_mean(group.accuracy, n_boot)
        paired = group.set_index("seed").accuracy - reference.xs(step, level="step").reindex(group.seed).to_numpy()
        paired = paired.dropna()
        diff, diff_low, diff_high = bootstrap_mean(paired, n_boot) if len(paired) else (math.nan,) * 3
        rows.append({"arm": arm, "step": int(step), "n_seeds": len(group), "mean": mean, "ci_low": low, "ci_high": high,
                     "diff_mean": diff, "diff_ci_low": diff_low, "diff_ci_high": diff_high,
                     "tokens_generated": float(group.tokens_generated.mean()), "wall_seconds": float(group.wall_seconds.mean())})  # fmt: skip
    return pd.DataFrame(rows)


def first_reach(curves: np.ndarray, xs: np.ndarray, threshold: float) -> float:
    """The first x at which the mean of `curves` (seeds x steps) reaches `threshold`; inf if it never does."""
    mean = curves.mean(axis=0)
    hit = np.nonzero(mean >= threshold - 1e-12)[0]
    return float(xs[hit[0]]) if len(hit) else math.inf


def reach(study: pd.DataFrame, arm: str, threshold: float, x: str = "step", n_boot: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """(estimate, low, high) of the first `x` (step or tokens) where `arm`'s mean accuracy reaches `threshold`.

    Resamples seeds; each resample's mean curve gives a first crossing (inf when it never crosses), so an
    interval end of inf reads "not reached in that share of resamples".
    """
    table = study[study.arm == arm].assign(_x=lambda t: t[x].astype(float))
    accuracy = table.pivot(index="seed", columns="step", values="accuracy")
    position = table.pivot(index="seed", columns="step", values="_x")
    keep = accuracy.columns[accuracy.notna().all() & position.notna().all()]  # steps every seed evaluated
    accuracy, position = accuracy[keep].to_numpy(), position[keep].to_numpy()
    estimate = first_reach(accuracy, position.mean(axis=0), threshold)
    if len(accuracy) < 2:
        return estimate, math.nan, math.nan
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(n_boot):
        pick = rng.integers(0, len(accuracy), size=len(accuracy))
        draws.append(first_reach(accuracy[pick], position[pick].mean(axis=0), threshold))
    low, high = np.quantile(np.asarray(draws), [(1 - LEVEL) / 2, (1 + LEVEL) / 2], method="lower")
    return estimate, float(low), float(high)


def claims(study: pd.DataFrame, final: pd.DataFrame, baseline: str, n_boot: int = 2000) -> pd.DataFrame:
    """Per arm, the four claims the replay papers make, each with its interval.

    - steps and generated tokens to reach the baseline's best mean held-out accuracy (RLEP: faster; FIFO: cheaper);
    - final accuracy and its paired difference to the baseline (prioritized replay: better at the end);
    - pass@k of the final evaluation (diversity).
    """
    summary = summarize(study, baseline, n_boot)
    target = float(summary[summary.arm == baseline]["mean"].max())
    last = summary.loc[summary.groupby("arm").step.idxmax()].set_index("arm")
    rows = []
    for arm in sorted(study.arm.unique(), key=lambda a: (a != baseline, a)):
        steps = reach(study, arm, target, "step", n_boot)
        tokens = reach(study, arm, target, "tokens_generated", n_boot)
        row = {"arm": arm, "n_seeds": int(last.loc[arm, "n_seeds"]), "target_accuracy": target,
               "steps_to_target": steps[0], "steps_ci_low": steps[1], "steps_ci_high": steps[2],
               "tokens_to_target": tokens[0], "tokens_ci_low": tokens[1], "tokens_ci_high": tokens[2],
               "final_step": int(last.loc[arm, "step"]), "final_mean": last.loc[arm, "mean"],
               "final_ci_low": last.loc[arm, "ci_low"], "final_ci_high": last.loc[arm, "ci_high"],
               "final_diff": last.loc[arm, "diff_mean"], "final_diff_ci_low": last.loc[arm, "diff_ci_low"],
               "final_diff_ci_high": last.loc[arm, "diff_ci_high"]}  # fmt: skip
        ends = final[final.arm == arm]
        k = int(ends.k.iloc[0]) if len(ends) else 0
        row.update(zip(("pass_at_k", "pass_ci_low", "pass_ci_high"), bootstrap_mean(ends.pass_at_k, n_boot) if len(ends) else (math.nan,) * 3))
        row["k"] = k
        rows.append(row)
    return pd.DataFrame(rows)
