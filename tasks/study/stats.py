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


def _to_target(table: pd.DataFrame, target: float, x: str) -> pd.DataFrame:
    """Per seed of one arm: `reached` (the first `x` at the target, inf if never) and `end` (`x` at its last
    evaluation)."""
    rows = {
        seed: {"reached": first_step_at(curve, target, x), "end": float(curve.sort_values("step")[x].iloc[-1])}
        for seed, curve in table.groupby("seed")
    }
    return pd.DataFrame.from_dict(rows, orient="index").sort_index()


def censored_differences(mine: pd.DataFrame, theirs: pd.DataFrame, x: str) -> pd.Series:
    """Per paired seed, arm minus against in `x` to the target, a run that did not reach it counted, not dropped.

    A run that did not reach the target is censored at its end: it would have needed at least one step more
    (`x` = step) or at least its total charged tokens. The difference is the one nearest 0 that this allows, so it
    never takes a sign the runs did not show and understates the gap against the arm that did not reach it:
    arm at 10 against a baseline that never did in 20 steps counts -11; an arm that never did in 20 against a
    baseline at 20 counts +1; an arm at 30 against a baseline that stopped unsuccessfully at 20, or two runs that
    both failed, count 0."""
    step = 1.0 if x == "step" else 0.0
    a, b = mine.reached, theirs.reached
    a_bound, b_bound = mine.end + step, theirs.end + step  # the least a censored run could have needed
    diff = a - b
    only_mine = np.isfinite(a) & ~np.isfinite(b)
    only_theirs = ~np.isfinite(a) & np.isfinite(b)
    diff = diff.where(~only_mine, np.minimum(a - b_bound, 0.0))
    diff = diff.where(~only_theirs, np.maximum(a_bound - b, 0.0))
    return diff.where(np.isfinite(a) | np.isfinite(b), 0.0)


def _to_target_list(values: pd.DataFrame, fmt: str) -> str:
    """Per-seed values to the target; a run that never reached it with the end it was censored at."""
    return ", ".join(
        f"{seed}: " + (f"not reached by {fmt.format(row.end)}" if math.isinf(row.reached) else fmt.format(row.reached))
        for seed, row in values.iterrows()
    )


def evaluate_claims(study: pd.DataFrame, claims: Sequence, baseline: str) -> pd.DataFrame:
    """Each claim of the configuration, measured: per seed, then paired (arm minus `against`) with its interval.

    - `accuracy_diff`: held-out accuracy at the claim's `step`; higher is better.
    - `steps_to_target` / `charged_tokens_to_target`: per seed, the first evaluation step (or charged tokens
      there) with accuracy >= `target`; lower is better. A seed where an arm never reaches it counts, censored
      (`censored_to_target`: at the end of the shorter of the two runs, one step or no tokens beyond it), so an
      arm that reached the target in 2 seeds of 5 is not compared on those 2 alone. When neither arm reached it
      in any seed the claim is `untestable: target not reached`. The table reports how many seeds each arm
      reached it in, and every seed's value with what a censored one was counted as.
    The verdict reads the interval only: `arm better` / `arm worse` when it excludes 0, else `no difference shown`.
    """
    rows = []
    for claim in claims:
        against = claim.against or baseline
        tables = {}
        for arm in (claim.arm, against):
            tables[arm] = study[study.arm == arm]
            if tables[arm].empty:
                raise ValueError(f"claim {claim.name!r}: arm {arm!r} has no finished run")
        fmt = {"accuracy_diff": "{:.3f}", "steps_to_target": "{:.0f}"}.get(claim.kind, "{:,.0f}")
        if claim.kind == "accuracy_diff":
            values = {}
            for arm, table in tables.items():
                at = table[table.step == claim.step]
                if at.empty:
                    raise ValueError(f"claim {claim.name!r}: arm {arm!r} was not evaluated at step {claim.step}")
                values[arm] = at.set_index("seed").accuracy.sort_index()
            mine, theirs = values[claim.arm], values[against].reindex(values[claim.arm].index)
            both = mine.notna() & theirs.notna()
            reached = {"arm_reached": None, "against_reached": None}
            per_seed = {"arm_per_seed": _seed_list(mine, fmt), "against_per_seed": _seed_list(values[against], fmt)}
            per_seed["diff_per_seed"] = _seed_list((mine - theirs)[both], "{:+.3f}")
        else:
            x = "step" if claim.kind == "steps_to_target" else "tokens_charged"
            raw = {arm: _to_target(table, claim.target, x) for arm, table in tables.items()}
            paired = raw[claim.arm].index.intersection(raw[against].index)
            mine, theirs = raw[claim.arm].loc[paired], raw[against].loc[paired]
            diff = censored_differences(mine, theirs, x)
            mine, theirs = mine.reached, theirs.reached
            both = pd.Series(True, index=paired)
            reached = {
                f"{k}_reached": int(np.isfinite(raw[a].reached).sum())
                for k, a in (("arm", claim.arm), ("against", against))
            }
            per_seed = {
                "arm_per_seed": _to_target_list(raw[claim.arm], fmt),
                "against_per_seed": _to_target_list(raw[against], fmt),
                "diff_per_seed": _seed_list(diff, "{:+,.0f}"),
            }
        if claim.kind == "accuracy_diff":
            diff = (mine - theirs)[both]
        mean, low, high = t_interval(diff) if len(diff) else (math.nan,) * 3
        higher_is_better = claim.kind == "accuracy_diff"
        if claim.kind != "accuracy_diff" and not reached["arm_reached"] and not reached["against_reached"]:
            verdict = "untestable: target not reached"
        elif math.isnan(low):
            verdict = "too few seeds"
        elif (low > 0) == higher_is_better and (low > 0 or high < 0):
            verdict = "arm better"
        elif low > 0 or high < 0:
            verdict = "arm worse"
        else:
            verdict = "no difference shown"
        rows.append(
            {
                "claim": claim.name,
                "kind": claim.kind,
                "arm": claim.arm,
                "against": against,
                "step": claim.step,
                "target": claim.target,
                "n_paired": int(both.sum()),
                **reached,
                "arm_mean": _finite_mean(mine),
                "against_mean": _finite_mean(theirs),
                "diff_mean": mean,
                "diff_ci_low": low,
                "diff_ci_high": high,
                "verdict": verdict,
                **per_seed,
            }
        )
    return pd.DataFrame(rows)


def _finite_mean(values: pd.Series) -> float:
    """The mean over the seeds with a value (for `*_to_target`, those that reached the target); NaN if none."""
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if len(finite) else math.nan


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
