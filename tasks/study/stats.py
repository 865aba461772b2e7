"""Statistics of a study: Student t intervals over seeds, paired differences, and the claims fixed beforehand.

Seeds are the unit: a seed is one whole training run, and runs of the same seed in two arms share their prompt
order and sampling seeds, so differences are taken per seed first (paired). With the handful of seeds a CPU
study affords (5), a percentile bootstrap under-covers (about 83% for a nominal 95% on normal data), so every
interval here is a 95% Student t interval with n - 1 degrees of freedom; with one seed there is none (NaN).
When every seed gives the same value (easy on a grid of evaluation steps) the t interval would be a point,
which is no 95% interval: there is none either (NaN, "no spread"), and a claim is then decided only by the
exact sign test (every seed the same sign: 2 / 2^n, below 5% from 6 seeds on).

Claims are named in the study's configuration before it runs (`StudyConfig.claims`: which arm against which,
the metric, the evaluation step or the target accuracy); `evaluate_claims` only reads them, so no figure in a
claims table is chosen after the curves are seen. Everything else (`summarize`, `endpoints`) is descriptive.

What was testable is said, not assumed: a claim is `untestable` when its arms cannot differ by its step (they
differ only in replay and neither replayed anything by then, in any seed: the runs' own `replayed` counts) or
when neither arm reached its target. Every claim carries the sd of its paired differences and the smallest
difference the study could detect with them (80% power, two-sided 5%, paired t: (t_0.975 + t_0.8, n - 1 degrees
of freedom) sd / sqrt(n)), its p-value, and a Holm-adjusted verdict across the study's testable claims.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

LEVEL = 0.95


def t_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high): the mean of `values` and its 95% Student t interval (n - 1 degrees of freedom); no
    interval (NaN) with fewer than 2 values or none spread (`no_spread`)."""
    from scipy.stats import t

    values = np.asarray(values, dtype=float)
    n = len(values)
    mean = float(values.mean()) if n else math.nan
    if n < 2 or no_spread(values):
        return mean, math.nan, math.nan
    half = float(t.ppf((1 + LEVEL) / 2, n - 1)) * float(values.std(ddof=1)) / math.sqrt(n)
    return mean, mean - half, mean + half


def no_spread(values: Sequence[float]) -> bool:
    """Two or more values, all the same (up to float rounding): a sample standard deviation of 0 says the seeds
    did not vary at the resolution measured, not that the mean is known exactly."""
    values = np.asarray(values, dtype=float)
    return len(values) >= 2 and float(np.ptp(values)) <= 1e-9 * max(1.0, float(np.abs(values).max()))


def sign_test_decides(n: int) -> bool:
    """Whether `n` seeds all of one sign are significant at the study's level (two-sided exact sign test:
    2 / 2^n < 5%, so n >= 6)."""
    return 2 * 0.5**n < 1 - LEVEL


def smallest_detectable(sd: float, n: int, power: float = 0.8) -> float:
    """The smallest paired mean difference a two-sided 5% paired t test detects with probability `power`, given
    the realized sd of the differences over n seeds: (t_{0.975, n-1} + t_{power, n-1}) sd / sqrt(n); NaN with
    fewer than 2 seeds."""
    from scipy.stats import t

    if n < 2 or math.isnan(sd):
        return math.nan
    return (float(t.ppf((1 + LEVEL) / 2, n - 1)) + float(t.ppf(power, n - 1))) * sd / math.sqrt(n)


def paired_t_p(diff: Sequence[float]) -> float:
    """Two-sided p-value of the paired t test of mean 0 (n - 1 degrees of freedom); NaN with fewer than 2 values
    or none spread (then the sign test decides: `sign_test_p`)."""
    from scipy.stats import ttest_1samp

    diff = np.asarray(diff, dtype=float)
    if len(diff) < 2 or no_spread(diff):
        return math.nan
    return float(ttest_1samp(diff, 0.0).pvalue)


def sign_test_p(wins: int, losses: int) -> float:
    """Two-sided exact sign test (ties left out): P(a split at least this uneven | no difference); 1 with no
    untied pair."""
    from scipy.stats import binom

    n = wins + losses
    return 1.0 if n == 0 else min(1.0, float(2 * binom.cdf(min(wins, losses), n, 0.5)))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values over the finite ones (NaN stays NaN, outside the family): the i-th
    smallest of m is max over j <= i of min(1, (m - j + 1) p_(j))."""
    p = np.asarray(p_values, dtype=float)
    tested = np.flatnonzero(np.isfinite(p))
    adjusted = np.full(len(p), math.nan)
    running = 0.0
    for rank, i in enumerate(sorted(tested, key=lambda i: p[i])):
        running = max(running, min(1.0, (len(tested) - rank) * p[i]))
        adjusted[i] = running
    return adjusted.tolist()


def _seed_list(values: pd.Series, fmt: str = "{:.3f}") -> str:
    """Per-seed values as `seed: value` pairs, so a reader sees the spread behind a mean."""
    return ", ".join(f"{seed}: {'not reached' if math.isinf(v) else fmt.format(v)}" for seed, v in values.items())


def summarize(study: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """One row per (arm, step): n_seeds, mean accuracy with its interval, the paired difference to `baseline` with
    its interval over the `n_paired` seeds the baseline was evaluated at that step as well (none, NaN, at a step
    it was not: a living-pool arm's refresh step off the evaluation schedule, or an arm with more steps), the
    per-seed accuracies, and the mean cost so far (generated tokens, charged tokens, training seconds, charged
    seconds, optimizer updates)."""
    reference = study[study.arm == baseline].set_index(["seed", "step"]).accuracy
    rows = []
    for (arm, step), group in study.groupby(["arm", "step"], sort=True):
        by_seed = group.set_index("seed").accuracy.sort_index()
        mean, low, high = t_interval(by_seed)
        keys = pd.MultiIndex.from_arrays([by_seed.index, [step] * len(by_seed)], names=["seed", "step"])
        paired = (by_seed - reference.reindex(keys).to_numpy()).dropna()
        diff, diff_low, diff_high = t_interval(paired) if len(paired) else (math.nan,) * 3
        rows.append(
            {
                "arm": arm,
                "step": int(step),
                "n_seeds": len(group),
                "n_paired": len(paired),
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


def _verdict(diff: pd.Series, low: float, high: float) -> str:
    """What paired differences of a higher-is-better measure (accuracy) support: the t interval when it exists;
    with no spread, the sign test."""
    if no_spread(diff):
        value = float(diff.iloc[0])
        if abs(value) <= 1e-12:
            return "no difference shown"
        if not sign_test_decides(len(diff)):
            return "no spread: interval undefined"
        return ("arm better" if value > 0 else "arm worse") + " (sign test: every seed)"
    if math.isnan(low):
        return "too few seeds"
    if low > 0 or high < 0:
        return "arm better" if low > 0 else "arm worse"
    return "no difference shown"


def _unpaired(mine: pd.Index, theirs: pd.Index) -> str:
    """Seeds with a value in one arm only (left out of the paired differences), said rather than dropped."""
    parts = [
        f"{side} only: {', '.join(str(seed) for seed in sorted(seeds))}"
        for side, seeds in (("arm", mine.difference(theirs)), ("against", theirs.difference(mine)))
        if len(seeds)
    ]
    return "; ".join(parts)


def at_equal_charge(mine: pd.DataFrame, theirs: pd.DataFrame, step: int) -> pd.DataFrame:
    """Per seed of the against arm's table `theirs` evaluated at `step`: the budget (its charged tokens there) and its
    accuracy; from the arm's table `mine`, the same seed's latest evaluation charged at most the budget (its step,
    charged tokens and accuracy: the model the arm had delivered when it had spent as much). A seed where even the
    arm's first evaluation was charged more (its dependencies alone cost more) has no arm values (NaN): it
    delivered no model within the budget. A seed the arm has no run for is left out."""
    rows = {}
    for seed, row in theirs[theirs.step == step].set_index("seed").sort_index().iterrows():
        curve = mine[mine.seed == seed]
        if curve.empty:
            continue
        within = curve[curve.tokens_charged <= row.tokens_charged * (1 + 1e-12)].sort_values("step")
        last = within.iloc[-1] if len(within) else None
        rows[seed] = {
            "budget": float(row.tokens_charged),
            "against_accuracy": float(row.accuracy),
            "arm_step": math.nan if last is None else float(last.step),
            "arm_tokens": math.nan if last is None else float(last.tokens_charged),
            "arm_accuracy": math.nan if last is None else float(last.accuracy),
        }
    return pd.DataFrame.from_dict(
        rows, orient="index", columns=["budget", "against_accuracy", "arm_step", "arm_tokens", "arm_accuracy"]
    )


def _equal_charge_list(values: pd.DataFrame) -> str:
    """Per seed, the arm's evaluation read at the budget (step and charged tokens), or that it had none."""
    return ", ".join(
        f"{seed}: over the budget ({row.budget:,.0f}) at its first evaluation"
        if math.isnan(row.arm_accuracy)
        else f"{seed}: {row.arm_accuracy:.3f} (step {row.arm_step:.0f}, {row.arm_tokens:,.0f} of {row.budget:,.0f})"
        for seed, row in values.iterrows()
    )


def evaluate_claims(
    study: pd.DataFrame,
    claims: Sequence,
    baseline: str,
    differ_only_in_replay: Callable[[str, str, int], bool] | None = None,
) -> pd.DataFrame:
    """Each claim of the configuration, measured: per seed, then paired (arm minus `against`), with its test.

    - `accuracy_diff`: held-out accuracy at the claim's `step`; higher is better. Test: the paired t test (its
      95% interval excluding 0 is `arm better` / `arm worse`, else `no difference shown`, `too few seeds` with
      one). When every seed gives the same difference there is no interval: the verdict is `no spread: interval
      undefined`, unless the exact sign test decides (every seed one sign, from 6 seeds on: `arm better (sign
      test: every seed)`) or the difference is 0. `untestable: no replay by step N` when the two arms differ
      only in replay or in a chance control's re-seeding not yet begun (`differ_only_in_replay(arm, against,
      N)`) and neither replayed a row up to step N in any paired seed (the study's `replayed` column, the runs'
      own count): they are then the same runs there.
    - `accuracy_at_equal_charge`: per seed, the budget is the tokens charged to `against` by its evaluation
      `step`, and the arm is read at its latest evaluation charged at most that budget (`at_equal_charge`): the
      model each had delivered for the same spend, so an arm charged for runs it depends on is read at an earlier
      step of its own. Higher is better; the test is accuracy_diff's. A seed in which even the arm's first
      evaluation cost more than the budget has no model within it: left out and named in `unpaired`, and the
      claim is `untestable: the arm is over the budget in every seed` when that is every seed.
    - `steps_to_target` / `charged_tokens_to_target`: per seed, the first evaluation step (or charged tokens
      there) with accuracy >= `target`; lower is better. Test: a paired exact sign test in which a seed that
      never reached the target ranks last, behind any that did (both censored, or equal: a tie, left out), so
      no censored seed is given a value. Its verdict: `arm better (sign test, censored last)` / `arm worse (...)`
      when p < 0.05, else `no difference shown`; `untestable: target not reached` when neither arm reached it in
      any seed, and `untestable: N paired seeds` with fewer than 6 (every seed one way is then p >= 0.0625, so
      the test could never decide; NaN p, outside Holm's family). The table reports how many seeds each arm
      reached it in, and a descriptive difference per seed (`censored_differences`: a censored run at the least
      it could have needed) with its t interval.

    Every claim: the sd of the counted paired differences (`diff_sd`), the smallest difference detectable with it
    (`sdd_80`: 80% power, two-sided 5%, paired t), the test's p-value (`p_value`, `test`), and `holm_p` /
    `holm_verdict`, Holm's adjustment over the testable claims of `claims` (an untestable one is outside the
    family and keeps its verdict). Only seeds with a run in both arms are paired (`n_paired`); any other is named
    in `unpaired`.
    """
    rows = []
    for claim in claims:
        against = claim.against or baseline
        tables = {}
        for arm in (claim.arm, against):
            tables[arm] = study[study.arm == arm]
            if tables[arm].empty:
                raise ValueError(f"claim {claim.name!r}: arm {arm!r} has no finished run")
        over, note = pd.Index([]), ""  # at equal charge: the seeds the arm had no model within the budget in
        if claim.kind == "accuracy_at_equal_charge":
            theirs = _at_step(claim, against, tables[against]).accuracy
            charged = at_equal_charge(tables[claim.arm], tables[against], claim.step)
            within = charged.dropna(subset=["arm_accuracy"])
            mine = within.arm_accuracy
            paired = mine.index.intersection(theirs.index)
            diff = mine.loc[paired] - theirs.loc[paired]
            over = charged.index.difference(within.index)
            if len(over):
                note = "arm over the budget at its first evaluation: " + ", ".join(map(str, sorted(over)))
            reached = {"arm_reached": None, "against_reached": None}
            per_seed = {
                "arm_per_seed": _equal_charge_list(charged),
                "against_per_seed": _seed_list(theirs),
                "diff_per_seed": _seed_list(diff, "{:+.3f}"),
            }
            mean, low, high = t_interval(diff) if len(diff) else (math.nan,) * 3
            if not len(diff):
                test, p, verdict = "none", math.nan, "untestable: the arm is over the budget in every seed"
            else:
                test, p, verdict = _accuracy_test(diff, low, high)
            better = float(diff.mean()) > 0 if len(diff) else False
        elif claim.kind == "accuracy_diff":
            values, replayed = {}, {}
            for arm, table in tables.items():
                at = _at_step(claim, arm, table)
                values[arm] = at.accuracy
                replayed[arm] = at.replayed if "replayed" in at else None
            paired = values[claim.arm].index.intersection(values[against].index)
            mine, theirs = values[claim.arm], values[against]
            diff = mine.loc[paired] - theirs.loc[paired]
            reached = {"arm_reached": None, "against_reached": None}
            per_seed = {
                "arm_per_seed": _seed_list(mine),
                "against_per_seed": _seed_list(theirs),
                "diff_per_seed": _seed_list(diff, "{:+.3f}"),
            }
            mean, low, high = t_interval(diff) if len(diff) else (math.nan,) * 3
            same_runs = (
                differ_only_in_replay is not None
                and differ_only_in_replay(claim.arm, against, claim.step)
                and all(r is not None and (r.reindex(paired) == 0).all() for r in replayed.values())
                and len(paired) > 0
            )
            if same_runs:
                test, p, verdict = "none", math.nan, f"untestable: no replay by step {claim.step}"
            else:
                test, p, verdict = _accuracy_test(diff, low, high)
            better = float(diff.mean()) > 0 if len(diff) else False
        else:
            x = "step" if claim.kind == "steps_to_target" else "tokens_charged"
            fmt = "{:.0f}" if x == "step" else "{:,.0f}"
            raw = {arm: _to_target(table, claim.target, x) for arm, table in tables.items()}
            paired = raw[claim.arm].index.intersection(raw[against].index)
            diff = censored_differences(raw[claim.arm].loc[paired], raw[against].loc[paired], x)
            mine, theirs = raw[claim.arm].reached, raw[against].reached
            reached = {"arm_reached": int(np.isfinite(mine).sum()), "against_reached": int(np.isfinite(theirs).sum())}
            per_seed = {
                "arm_per_seed": _to_target_list(raw[claim.arm], fmt),
                "against_per_seed": _to_target_list(raw[against], fmt),
                "diff_per_seed": _seed_list(diff, "{:+,.0f}"),
            }
            mean, low, high = t_interval(diff) if len(diff) else (math.nan,) * 3
            a, b = mine.loc[paired], theirs.loc[paired]  # inf: never reached, ranked last
            wins, losses = int((a < b).sum()), int((a > b).sum())
            better = wins > losses
            if not reached["arm_reached"] and not reached["against_reached"]:
                test, p, verdict = "none", math.nan, "untestable: target not reached"
            elif not sign_test_decides(len(paired)):  # even every seed one way would not be significant
                test, p = "sign test, censored last", math.nan
                verdict = f"untestable: {len(paired)} paired seeds (the sign test needs 6)"
            else:
                test, p = "sign test, censored last", sign_test_p(wins, losses)
                verdict = _decided(p, better, "sign test, censored last")
        sd = float(diff.std(ddof=1)) if len(diff) >= 2 else math.nan
        rows.append(
            {
                "claim": claim.name,
                "kind": claim.kind,
                "arm": claim.arm,
                "against": against,
                "step": claim.step,
                "target": claim.target,
                "n_paired": len(paired),
                "unpaired": "; ".join(
                    part for part in (_unpaired(mine.index, theirs.index.difference(over)), note) if part
                ),
                **reached,
                "arm_mean": _finite_mean(mine.loc[paired]),
                "against_mean": _finite_mean(theirs.loc[paired]),
                "diff_mean": mean,
                "diff_ci_low": low,
                "diff_ci_high": high,
                "verdict": verdict,
                **per_seed,
                "diff_sd": sd,
                "sdd_80": smallest_detectable(sd, len(diff)),
                "test": test,
                "p_value": p,
                "direction_better": better,
            }
        )
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    table["holm_p"] = holm(table.p_value.tolist())
    table["holm_verdict"] = [
        row.verdict if math.isnan(row.holm_p) else _decided(row.holm_p, row.direction_better, "Holm")
        for row in table.itertuples(index=False)
    ]
    return table.drop(columns="direction_better")


def _at_step(claim, arm: str, table: pd.DataFrame) -> pd.DataFrame:
    """`arm`'s rows (its `table`) at the claim's evaluation step, by seed; refused naming both when it has none."""
    at = table[table.step == claim.step]
    if at.empty:
        raise ValueError(f"claim {claim.name!r}: arm {arm!r} was not evaluated at step {claim.step}")
    return at.set_index("seed").sort_index()


def _accuracy_test(diff: pd.Series, low: float, high: float) -> tuple[str, float, str]:
    """(test, p-value, verdict) of paired accuracy differences (higher is better): the paired t test, or with no
    spread the exact sign test."""
    verdict = _verdict(diff, low, high)
    if math.isnan(p := paired_t_p(diff)) and no_spread(diff):
        return "sign test", sign_test_p(int((diff > 0).sum()), int((diff < 0).sum())), verdict
    return "paired t", p, verdict


def _decided(p: float, better: bool, by: str) -> str:
    """The verdict a p-value supports at the study's level, with the test that gave it."""
    if math.isnan(p) or p >= 1 - LEVEL:
        return "no difference shown"
    return ("arm better" if better else "arm worse") + f" ({by})"


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
