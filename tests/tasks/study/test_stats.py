"""The study's statistics on hand-made tables, where the right answer is known."""

import math

import numpy as np
import pandas as pd
import pytest

from tasks.study.stats import bootstrap_mean, claims, first_reach, summarize


def _table(arms):
    """arms: name -> function(seed, step) -> accuracy; 5 seeds, steps 0/10/20, tokens 100 per step."""
    rows = [{"arm": arm, "seed": seed, "step": step, "accuracy": f(seed, step), "tokens_generated": 100 * step * (0.5 if arm == "cheap" else 1),
             "wall_seconds": float(step)} for arm, f in arms.items() for seed in range(5) for step in (0, 10, 20)]  # fmt: skip
    return pd.DataFrame(rows)


def test_bootstrap_interval_contains_the_mean_and_shrinks_with_more_seeds():
    rng = np.random.default_rng(0)
    few, many = rng.normal(0.5, 0.1, 5), rng.normal(0.5, 0.1, 50)
    for values in (few, many):
        mean, low, high = bootstrap_mean(values)
        assert mean == pytest.approx(values.mean()) and low < mean < high
    assert bootstrap_mean(many)[2] - bootstrap_mean(many)[1] < bootstrap_mean(few)[2] - bootstrap_mean(few)[1]
    assert math.isnan(bootstrap_mean([0.3])[1])  # one seed: no interval
    assert bootstrap_mean([0.2, 0.2, 0.2])[1:] == (pytest.approx(0.2), pytest.approx(0.2))


def test_paired_difference_has_the_right_sign_and_is_narrower_than_the_spread_between_seeds():
    # Seeds differ a lot (0.1 apart); the arm is better by exactly 0.05 on every seed.
    study = _table({"baseline": lambda s, t: 0.1 * s + 0.01 * t, "better": lambda s, t: 0.1 * s + 0.01 * t + 0.05})
    summary = summarize(study, "baseline").set_index(["arm", "step"])
    row = summary.loc[("better", 20)]
    assert row.diff_mean == pytest.approx(0.05) and row.diff_ci_low == pytest.approx(0.05) and row.diff_ci_high == pytest.approx(0.05)
    assert row.ci_high - row.ci_low > 0.1  # unpaired, the seeds' spread would hide the difference
    worse = summarize(_table({"baseline": lambda s, t: 0.5 + 0.01 * s, "worse": lambda s, t: 0.4 + 0.02 * s}), "baseline")
    final = worse.set_index(["arm", "step"]).loc[("worse", 20)]
    assert final.diff_mean < 0 and final.diff_ci_high < 0 and final.n_seeds == 5


def test_first_reach_and_the_claims():
    assert first_reach(np.array([[0.1, 0.3, 0.5]]), np.array([0, 10, 20]), 0.3) == 10
    assert first_reach(np.array([[0.1, 0.2]]), np.array([0, 10]), 0.3) == math.inf
    study = _table({"baseline": lambda s, t: 0.2 + 0.01 * t, "cheap": lambda s, t: 0.2 + 0.01 * t, "fast": lambda s, t: 0.2 + 0.02 * t})
    final = pd.DataFrame([{"arm": a, "seed": s, "k": 4, "avg_at_k": 0.3, "pass_at_k": 0.6, "maj_at_k": 0.3}
                          for a in ("baseline", "cheap", "fast") for s in range(5)])  # fmt: skip
    table = claims(study, final, "baseline").set_index("arm")
    assert table.loc["baseline", "target_accuracy"] == pytest.approx(0.4)
    assert table.loc["fast", "steps_to_target"] == 10 and table.loc["baseline", "steps_to_target"] == 20
    assert table.loc["cheap", "tokens_to_target"] == 1000 and table.loc["baseline", "tokens_to_target"] == 2000
    assert table.loc["fast", "final_diff"] == pytest.approx(0.2) and table.loc["fast", "pass_at_k"] == pytest.approx(0.6)
    never = claims(_table({"baseline": lambda s, t: 0.2 + 0.01 * t, "flat": lambda s, t: 0.2}), final, "baseline").set_index("arm")
    assert never.loc["flat", "steps_to_target"] == math.inf
