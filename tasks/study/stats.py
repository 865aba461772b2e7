"""Statistics of a study: Student t intervals over seeds, paired differences, and the claims fixed beforehand.

Seeds are the unit: a seed is one whole training run, and runs of the same seed in two arms share their prompt
order and sampling seeds, so differences are taken per seed first (paired). With the handful of seeds a CPU
study affords (5), a percentile bootstrap under-covers (about 83% for a nominal 95% on normal data), so every
interval here is a 95% Student t interval with n - 1 degrees of freedom; with one seed there is none (NaN).

Claims are named in the study's configuration before it runs (`StudyConfig.claims`: which arm against which,
the metric, the evaluation step or the target accuracy); `evaluate_claims` only reads them, so no figure in a
claims table is chosen after the curves are seen. Everything else (`summarize`, `endpoints`) is descriptive.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

LEVEL = 0.95


def t_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high): the mean of `values` and its 95% Student t interval (n - 1 degrees of freedom)."""
    from scipy.stats import t

    values = np.asarray(values, dtype=float)
    n = len(values)
    mean = float(values.mean()) if n else math.nan
    if n < 2:
        return mean, math.nan, math.nan
    half = float(t.ppf((1 + LEVEL) / 2, n - 1)) * float(values.std(ddof=1)) / math.sqrt(n)
    return mean, mean - half, mean + half


def _seed_list(values: pd.Series, fmt: str = "{:.3f}") -> str:
    """Per-seed values as `seed: value` pairs, so a reader sees the spread behind a mean."""
    return ", ".join(f"{seed}: {'not reached' if math.isinf(v) else fmt.format(v)}" for seed, v in values.items())


def summarize(study: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """One row per (arm, step): n_seeds, mean accuracy with its interval, the paired difference to `baseline` with
    its interval, the per-seed accuracies, and the mean cost so far (generated tokens, charged tokens, training
    seconds, charged seconds, optimizer updates)."""
    reference = study[study.arm == baseline].set_index(["seed", "step"]).accuracy
    rows = []
    for (arm, step), group in study.groupby(["arm", "step"], sort=True):
        by_seed = group.set_index("seed").accuracy.sort_index()
        mean, low, high = t_interval(by_seed)
        paired = (by_seed - reference.xs(step, level="step").reindex(by_seed.index)).dropna()
        diff, diff_low, diff_high = t_interval(paired) if len(paired) else (math.nan,) * 3
        rows.append(
            {
                "arm": arm,
                "step": int(step),
                "n_seeds": len(group),
                "mean": mean,
                "ci_low": low,
                "ci_high": high,
                "diff_mean": diff,
                "diff_ci_low": diff_low,
                "diff_ci_high": diff_high,
                "per_seed": _seed_list(by_seed),
                **{column: float(group[column].mean()) for column in COST_COLUMNS if column in group},
            }
        )
    return pd.DataFrame(rows)


COST_COLUMNS = ("tokens_generated", "tokens_charged", "wall_seconds", "seconds_charged", "optimizer_updates")


def first_step_at(curve: pd.DataFrame, target: float, x: str = "step") -> float:
    """The `x` (step, or charged tokens) of the first evaluation of one seed's curve (rows by step) with accuracy
    >= `target`; inf if none."""
    hit = curve[curve.accuracy >= target - 1e-12]
    return float(hit.sort_values("step")[x].iloc[0]) if len(hit) else math.inf


def evaluate_claims(study: pd.DataFrame, claims: Sequence, baseline: str) -> pd.DataFrame:
    """Each claim of the configuration, measured: per seed, then paired (arm minus `against`) with its interval.

    - `accuracy_diff`: held-out accuracy at the claim's `step`; higher is better.
    - `steps_to_target` / `charged_tokens_to_target`: per seed, the first evaluation step (or charged tokens
      there) with accuracy >= `target`; lower is better. A seed where either arm never reaches it has no
      paired difference: the table reports how many seeds each arm reached it in, and the interval is over the
      seeds where both did.
    The verdict reads the interval only: `arm better` / `arm worse` when it excludes 0, else `no difference shown`.
    """
    rows = []
    for claim in claims:
        against = claim.against or baseline
        values = {}
        for arm in (claim.arm, against):
            table = study[study.arm == arm]
            if table.empty:
                raise ValueError(f"claim {claim.name!r}: arm {arm!r} has no finished run")
            if claim.kind == "accuracy_diff":
                at = table[table.step == claim.step]
                if at.empty:
                    raise ValueError(f"claim {claim.name!r}: arm {arm!r} was not evaluated at step {claim.step}")
                values[arm] = at.set_index("seed").accuracy.sort_index()
            else:
                x = "step" if claim.kind == "steps_to_target" else "tokens_charged"
                values[arm] = (
                    table.groupby("seed")
                    .apply(lambda c, x=x, target=claim.target: first_step_at(c, target, x), include_groups=False)
                    .sort_index()
                )
        mine, theirs = values[claim.arm], values[against].reindex(values[claim.arm].index)
        both = mine.notna() & theirs.notna() & np.isfinite(mine) & np.isfinite(theirs)
        diff = (mine - theirs)[both]
        mean, low, high = t_interval(diff) if len(diff) else (math.nan,) * 3
        higher_is_better = claim.kind == "accuracy_diff"
        if math.isnan(low):
            verdict = "too few seeds"
        elif (low > 0) == higher_is_better and (low > 0 or high < 0):
            verdict = "arm better"
        elif low > 0 or high < 0:
            verdict = "arm worse"
        else:
            verdict = "no difference shown"
        fmt = (
            "{:,.0f}"
            if claim.kind == "charged_tokens_to_target"
            else ("{:.0f}" if claim.kind == "steps_to_target" else "{:.3f}")
        )
        rows.append(
            {
                "claim": claim.name,
                "kind": claim.kind,
                "arm": claim.arm,
                "against": against,
                "step": claim.step,
                "target": claim.target,
                "n_paired": int(both.sum()),
                "arm_reached": int(np.isfinite(mine).sum()),
                "against_reached": int(np.isfinite(theirs).sum()),
                "arm_mean": float(mine[np.isfinite(mine)].mean()) if np.isfinite(mine).any() else math.nan,
                "against_mean": float(theirs[np.isfinite(theirs)].mean()) if np.isfinite(theirs).any() else math.nan,
                "diff_mean": mean,
                "diff_ci_low": low,
                "diff_ci_high": high,
                "verdict": verdict,
                "arm_per_seed": _seed_list(mine, fmt),
                "against_per_seed": _seed_list(theirs, fmt),
            }
        )
    return pd.DataFrame(rows)


def endpoints(study: pd.DataFrame, final: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """Descriptive, per arm: the last evaluation step's accuracy and its paired difference to `baseline`, the final
    pass@k, and the cost of the whole run (own and charged), each with its t interval over seeds."""
    summary = summarize(study, baseline)
    last = summary.loc[summary.groupby("arm").step.idxmax()].set_index("arm")
    rows = []
    for arm in sorted(study.arm.unique(), key=lambda a: (a != baseline, a)):
        row = {"arm": arm, "n_seeds": int(last.loc[arm, "n_seeds"]), "final_step": int(last.loc[arm, "step"])}
        for name in ("mean", "ci_low", "ci_high", "diff_mean", "diff_ci_low", "diff_ci_high", *COST_COLUMNS):
            if name in last.columns:
                row[f"final_{name}" if name in ("mean", "ci_low", "ci_high") else name] = last.loc[arm, name]
        ends = final[final.arm == arm]
        row["k"] = int(ends.k.iloc[0]) if len(ends) else 0
        row.update(
            zip(
                ("pass_at_k", "pass_ci_low", "pass_ci_high"),
                t_interval(ends.pass_at_k) if len(ends) else (math.nan,) * 3,
            )
        )
        rows.append(row)
    return pd.DataFrame(rows)
