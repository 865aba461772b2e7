"""The study's statistics on hand-made tables, where the right answer is known."""

import math

import numpy as np
import pandas as pd
import pytest

from rlep.tasks.settings.study import ClaimConfig
from rlep.tasks.study.plan import Run
from rlep.tasks.study.stats import (
    censored_differences,
    evaluate_claims,
    holm,
    smallest_detectable,
    summarize,
    t_interval,
)


def _table(arms):
    """arms: name -> function(seed, step) -> accuracy; 5 seeds, steps 0/10/20, tokens 100 per step."""
    rows = [
        {
            "arm": arm,
            "seed": seed,
            "step": step,
            "accuracy": f(seed, step),
            "tokens_generated": 100 * step * (0.5 if arm == "cheap" else 1),
            "wall_seconds": float(step),
        }
        for arm, f in arms.items()
        for seed in range(5)
        for step in (0, 10, 20)
    ]
    return pd.DataFrame(rows)


def test_t_interval_is_the_student_t_interval_with_n_minus_1_degrees_of_freedom():
    # [1, 2, 3]: mean 2, sd 1, t(0.975, 2) = 4.302653 -> half width 4.302653 / sqrt(3) = 2.484138.
    assert t_interval([1.0, 2.0, 3.0]) == pytest.approx((2.0, 2.0 - 2.484138, 2.0 + 2.484138), rel=1e-6)
    # Five seeds: t(0.975, 4) = 2.776445, wider than the normal 1.96 a bootstrap approaches.
    values = [0.70, 0.72, 0.69, 0.75, 0.74]
    mean, low, high = t_interval(values)
    assert (high - mean) == pytest.approx(2.776445 * np.std(values, ddof=1) / math.sqrt(5), rel=1e-6)
    assert math.isnan(t_interval([0.3])[1])  # one seed: no interval
    assert t_interval([0.2, 0.2, 0.2])[0] == pytest.approx(0.2)
    assert all(math.isnan(v) for v in t_interval([0.2, 0.2, 0.2])[1:])  # no spread: no interval, not [0.2, 0.2]


def test_t_interval_covers_at_its_nominal_level_with_five_seeds():
    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(4000):
        _, low, high = t_interval(rng.normal(0.5, 0.1, 5))
        hits += low <= 0.5 <= high
    assert 0.94 < hits / 4000 < 0.96


def test_paired_difference_has_the_right_sign_and_is_narrower_than_the_spread_between_seeds():
    # Seeds differ a lot (0.1 apart); the arm is better by exactly 0.05 on every seed.
    study = _table({"baseline": lambda s, t: 0.1 * s + 0.01 * t, "better": lambda s, t: 0.1 * s + 0.01 * t + 0.05})
    summary = summarize(study, "baseline").set_index(["arm", "step"])
    row = summary.loc[("better", 20)]
    assert row.diff_mean == pytest.approx(0.05) and math.isnan(row.diff_ci_low) and math.isnan(row.diff_ci_high)
    assert row.ci_high - row.ci_low > 0.1  # unpaired, the seeds' spread would hide the difference
    worse = summarize(
        _table({"baseline": lambda s, t: 0.5 + 0.01 * s, "worse": lambda s, t: 0.4 + 0.02 * s}), "baseline"
    )
    final = worse.set_index(["arm", "step"]).loc[("worse", 20)]
    assert final.diff_mean < 0 and final.diff_ci_high < 0 and final.n_seeds == 5


def _claim(**kw):
    return ClaimConfig.model_validate({"name": "c", "arm": "fast", **kw})


def test_claims_are_measured_as_configured_paired_by_seed():
    study = _table(
        {
            "baseline": lambda s, t: 0.2 + 0.01 * t + 0.01 * s,
            "fast": lambda s, t: 0.2 + 0.02 * t + 0.01 * s + 0.001 * s * (t == 10),
            "flat": lambda s, t: 0.2,
        }
    )
    study["tokens_charged"] = study.tokens_generated + np.where(study.arm == "fast", 5000 + 100 * study.seed, 0)
    table = evaluate_claims(
        study,
        [
            _claim(name="early", kind="accuracy_diff", step=10),
            _claim(name="steps", kind="steps_to_target", target=0.4),
            _claim(name="tokens", kind="charged_tokens_to_target", target=0.4),
            _claim(name="never", arm="flat", kind="steps_to_target", target=0.4),
        ],
        "baseline",
    ).set_index("claim")
    early = table.loc["early"]
    assert early.diff_mean == pytest.approx(0.102) and early.n_paired == 5 and early.verdict == "arm better"
    steps = table.loc["steps"]  # fast reaches 0.4 at step 10 on every seed, the baseline at 20: -10 every seed
    # To a target the test is the paired sign test: 5 of 5 one way has p = 2 / 2^5 = 0.0625, not below 5%, so with
    # 5 seeds it can never decide: untestable, said as such (not "no difference shown"), and outside Holm's family.
    assert (
        steps.diff_mean == pytest.approx(-10) and steps.verdict == "untestable: 5 paired seeds (the sign test needs 6)"
    )
    assert steps.test == "sign test, censored last" and math.isnan(steps.p_value) and math.isnan(steps.holm_p)
    assert "0: 10" in steps.arm_per_seed and "0: 20" in steps.against_per_seed
    tokens = table.loc["tokens"]  # 1000 own + 5000-5400 charged against 2000: the faster arm costs more
    assert tokens.diff_mean == pytest.approx(4200) and tokens.verdict.startswith("untestable: 5 paired")
    never = table.loc["never"]
    assert never.arm_reached == 0 and never.n_paired == 5 and never.diff_per_seed == "0: +1, 1: +1, 2: +1, 3: +1, 4: +1"
    assert never.verdict.startswith("untestable: 5 paired")  # ranked last 5 of 5: p 0.0625 at best
    with pytest.raises(ValueError, match="not evaluated at step 15"):
        evaluate_claims(study, [_claim(kind="accuracy_diff", step=15)], "baseline")


def test_a_claim_needs_its_step_or_target():
    with pytest.raises(ValueError, match="accuracy_diff needs `step`"):
        _claim(kind="accuracy_diff")
    with pytest.raises(ValueError, match="accuracy_at_equal_charge needs `step`"):
        _claim(kind="accuracy_at_equal_charge")
    with pytest.raises(ValueError, match="steps_to_target needs `target`"):
        _claim(kind="steps_to_target")


def test_dependencies_are_charged_in_full_once_each(monkeypatch):
    import rlep.tasks.study.runs as runs

    explore = Run("baseline/seed-0", "train", 0, "baseline", None)
    collect = Run("collect/seed-0", "collect", 0, None, None, needs=["baseline/seed-0"])
    rlep = Run("rlep/seed-0", "train", 0, "rlep", None, needs=["collect/seed-0"])
    costs = {
        "baseline/seed-0": {"tokens_generated": 1000.0, "seconds": 60.0},
        "collect/seed-0": {"tokens_generated": 300.0, "seconds": 20.0},
    }
    monkeypatch.setattr(runs, "run_cost", lambda run: costs[run.key])
    by_key = {r.key: r for r in (explore, collect, rlep)}
    assert runs.dependency_cost(rlep, by_key) == {"tokens_generated": 1300.0, "seconds": 80.0}
    assert runs.dependency_cost(explore, by_key) == {"tokens_generated": 0.0, "seconds": 0.0}
    # Reached twice (directly and through the collection), the exploration is still charged once.
    both = Run("rlep2/seed-0", "train", 0, "rlep2", None, needs=["collect/seed-0", "baseline/seed-0"])
    assert runs.dependency_cost(both, by_key) == {"tokens_generated": 1300.0, "seconds": 80.0}


def test_a_step_recorded_twice_in_a_run_is_refused_naming_the_file_and_the_run(tmp_path):
    from types import SimpleNamespace

    from rlep.tasks.study.plan import StudyError
    from rlep.tasks.study.runs import gather

    out = tmp_path / "rlep" / "seed-0"
    out.mkdir(parents=True)
    pd.DataFrame({"step": [0, 5, 5], "data_source": "all", "avg_at_k": [0.1, 0.2, 0.3]}).to_parquet(
        out / "eval.parquet"
    )
    pd.DataFrame({"step": [1, 2, 3, 4, 5]}).to_parquet(out / "metrics.parquet")
    run = Run("rlep/seed-0", "train", 0, "rlep", SimpleNamespace(out=str(out)))
    with pytest.raises(StudyError, match=r"eval\.parquet: step 5 recorded twice in run rlep/seed-0"):
        gather([run])


def _finished_train_run(out, steps=(1, 2)):
    """A training run's evaluation and metrics files as a finished run leaves them (2 steps, 10 tokens each)."""
    out.mkdir(parents=True)
    pd.DataFrame({"step": [0, *steps], "data_source": "all", "avg_at_k": [0.1, 0.2, 0.3]}).to_parquet(
        out / "eval.parquet"
    )
    pd.DataFrame({"step": list(steps), "tokens_generated_total": [10, 20], "time_step": [1.0, 1.0]}).to_parquet(
        out / "metrics.parquet"
    )


def test_gather_accumulates_each_step_and_reads_the_whole_sets_final_row(tmp_path):
    """Per evaluation step: updates, trained rows replayed and seconds so far (the dependency's seconds charged on
    top); a living-pool arm's later part, sharing its directory, is not gathered again; the final evaluation is
    the whole set's row, not a data source's."""
    from types import SimpleNamespace

    from rlep.data.run_layout import TrainRunLayout
    from rlep.tasks.study.runs import gather

    _finished_train_run(tmp_path / "explore")
    arm = TrainRunLayout(tmp_path / "living")
    arm.root.mkdir()
    pd.DataFrame({"step": [0, 1, 2], "data_source": "all", "avg_at_k": [0.1, 0.2, 0.3]}).to_parquet(arm.eval)
    metrics = {"step": [1, 2], "tokens_generated_total": [10, 20], "time_step": [1.0, 3.0]}
    metrics |= {"optimizer_updates": [2, 2], "tokens_trained": [5, 7], "replay_rows": [1, 3]}
    pd.DataFrame(metrics).to_parquet(arm.metrics)
    arm.final_eval.root.mkdir()
    final = {"k": [1, 1], "avg_at_k": [0.9, 0.4], "pass_at_k": [0.9, 0.4], "maj_at_k": [0.9, 0.4]}
    pd.DataFrame({"data_source": ["add", "all"], **final}).to_parquet(arm.final_eval.eval)
    explore = Run("explore/seed-0", "train", 0, None, SimpleNamespace(out=str(tmp_path / "explore")))
    config = SimpleNamespace(out=str(arm.root))
    first = Run("living/seed-0", "train", 0, "living", config, needs=[explore.key], span=(0, 1))
    later = Run("living/seed-0/steps-2-2", "train", 0, "living", config, needs=[first.key], span=(1, 2))
    study, final_table = gather([explore, first, later])
    assert study.step.tolist() == [0, 1, 2]  # once
    assert study.optimizer_updates.tolist() == [0, 2, 4] and study.tokens_trained.tolist() == [0, 5, 12]
    assert study.replayed.tolist() == [0, 1, 4] and study.wall_seconds.tolist() == [0.0, 1.0, 4.0]
    assert study.seconds_charged.tolist() == [2.0, 3.0, 6.0]  # the exploration's 2 seconds on top
    assert final_table[["arm", "avg_at_k"]].values.tolist() == [["living", 0.4]]


def test_gather_reports_the_runs_asked_for_and_charges_their_dependencies_from_the_whole_plan(tmp_path):
    """`--report-only` gathers the finished arms only, yet an arm's dependency (an exploration, a baseline whose
    record no longer counts) is still charged; one that never ran is named, not a KeyError."""
    from types import SimpleNamespace

    from rlep.tasks.study.plan import StudyError
    from rlep.tasks.study.runs import gather

    for name in ("explore", "rlep", "baseline"):
        _finished_train_run(tmp_path / name)
    explore = Run("explore/seed-0", "train", 0, None, SimpleNamespace(out=str(tmp_path / "explore")))
    rlep = Run("rlep/seed-0", "train", 0, "rlep", SimpleNamespace(out=str(tmp_path / "rlep")), needs=[explore.key])
    baseline = Run("baseline/seed-0", "train", 0, "baseline", SimpleNamespace(out=str(tmp_path / "baseline")))
    study, _ = gather([explore, rlep, baseline], only={rlep.key})
    assert set(study.arm) == {"rlep"} and study.tokens_charged.tolist() == [20.0, 30.0, 40.0]
    with pytest.raises(StudyError, match="no arm's training run to gather"):
        gather([explore, rlep, baseline], only=set())
    never = Run("explore/seed-0", "train", 0, None, SimpleNamespace(out=str(tmp_path / "never")))
    with pytest.raises(StudyError, match=r"rlep/seed-0 depends on explore/seed-0, which has not finished: .*never"):
        gather([never, rlep], only={rlep.key})


def test_a_seed_that_never_reaches_the_target_counts_against_its_arm():
    # The arm reaches 0.4 at step 10 in 2 of 5 seeds and never in the other 3; the baseline at step 20 in all 5.
    # Over the 2 seeds where both reached it, the arm was 10 steps faster every time: "arm better" before. Censored
    # at the end of the run (step 20 + 1), the 3 seeds count: -10, -10, +1, +1, +1, no difference shown.
    study = _table(
        {
            "baseline": lambda s, t: 0.2 + 0.01 * t,
            "fast": lambda s, t: 0.2 + (0.02 * t if s < 2 else 0.005 * t),
        }
    )
    study["tokens_charged"] = study.tokens_generated
    table = evaluate_claims(
        study,
        [
            _claim(name="steps", kind="steps_to_target", target=0.4),
            _claim(name="tokens", kind="charged_tokens_to_target", target=0.4),
        ],
        "baseline",
    ).set_index("claim")
    steps = table.loc["steps"]
    assert (steps.n_paired, steps.arm_reached, steps.against_reached) == (5, 2, 5)
    assert steps.diff_mean == pytest.approx((-10 - 10 + 1 + 1 + 1) / 5)
    assert steps.verdict.startswith("untestable: 5 paired") and steps.diff_ci_high > 0
    assert "2: not reached by 20" in steps.arm_per_seed and "2: +1" in steps.diff_per_seed
    tokens = table.loc["tokens"]  # censored at the run's total: 2,000 tokens, against the baseline's 2,000 at step 20
    assert tokens.diff_mean == pytest.approx((-1000 - 1000 + 0 + 0 + 0) / 5) and tokens.verdict.startswith("untestable")


def test_a_censored_difference_is_the_one_nearest_0_the_runs_allow():
    inf = math.inf
    # Per seed: the arm's (reached, end) against the baseline's.
    cases = {
        0: ((10, 20), (inf, 20), -11.0),  # the baseline would have needed at least step 21
        1: ((inf, 20), (20, 20), 1.0),  # the arm at least 21 against 20
        2: ((30, 30), (inf, 20), 0.0),  # the baseline stopped unsuccessfully before the arm's 30: no sign shown
        3: ((inf, 20), (30, 30), 0.0),  # the same, the other way round
        4: ((inf, 20), (inf, 20), 0.0),  # neither reached it
        5: ((12, 20), (15, 20), -3.0),  # both reached it: the plain difference
    }
    mine, theirs = (
        pd.DataFrame({s: dict(zip(("reached", "end"), case[side])) for s, case in cases.items()}).T for side in (0, 1)
    )
    diff = censored_differences(mine, theirs, "step")
    assert diff.tolist() == [case[2] for case in cases.values()]
    # In charged tokens the bound is the run's total itself (no step more to add).
    assert censored_differences(mine, theirs, "tokens").tolist() == [-10.0, 0.0, 0.0, 0.0, 0.0, -3.0]


def test_a_target_neither_arm_reaches_is_untestable():
    study = _table({"baseline": lambda s, t: 0.2, "fast": lambda s, t: 0.2 + 0.001 * s})
    table = evaluate_claims(study, [_claim(kind="steps_to_target", target=0.4)], "baseline")
    row = table.iloc[0]
    assert (row.arm_reached, row.against_reached) == (0, 0) and row.verdict == "untestable: target not reached"


def test_the_same_difference_on_every_seed_is_no_interval_and_decides_only_by_a_sign_test():
    # Every seed +0.05 (easy on a coarse grid): the t interval is [0.05, 0.05], which is no 95% interval. With
    # 5 seeds, 5 of 5 the same sign has probability 2 / 2^5 = 0.0625 under no difference: not decisive; with 6,
    # 0.031: decisive, and said to be decided by the signs.
    def study(seeds):
        return pd.DataFrame(
            [
                {
                    "arm": arm,
                    "seed": seed,
                    "step": step,
                    "accuracy": 0.1 * seed + 0.01 * step + (0.05 if arm == "fast" else 0),
                }
                for arm in ("baseline", "fast")
                for seed in range(seeds)
                for step in (0, 10)
            ]
        )

    five = evaluate_claims(study(5), [_claim(kind="accuracy_diff", step=10)], "baseline").iloc[0]
    assert five.diff_mean == pytest.approx(0.05) and math.isnan(five.diff_ci_low)
    assert five.verdict == "no spread: interval undefined"
    six = evaluate_claims(study(6), [_claim(kind="accuracy_diff", step=10)], "baseline").iloc[0]
    assert six.verdict == "arm better (sign test: every seed)"


def test_seeds_in_one_arm_only_are_reported_not_dropped_silently():
    study = _table({"baseline": lambda s, t: 0.2 + 0.01 * t, "fast": lambda s, t: 0.2 + 0.02 * t + 0.001 * s})
    study = study[~((study.arm == "fast") & (study.seed == 4))]
    study = pd.concat([study, study[(study.arm == "fast") & (study.seed == 0)].assign(seed=7)])
    for kind in ({"kind": "accuracy_diff", "step": 10}, {"kind": "steps_to_target", "target": 0.4}):
        row = evaluate_claims(study, [_claim(**kind)], "baseline").iloc[0]
        assert row.n_paired == 4 and row.unpaired == "arm only: 7; against only: 4", kind
    # The means are over the paired seeds (0-3), as the difference is.
    row = evaluate_claims(study, [_claim(kind="accuracy_diff", step=10)], "baseline").iloc[0]
    paired = study[(study.step == 10) & study.seed.isin([0, 1, 2, 3])]
    assert row.arm_mean == pytest.approx(paired[paired.arm == "fast"].accuracy.mean())
    assert row.against_mean == pytest.approx(paired[paired.arm == "baseline"].accuracy.mean())
    # One paired seed: no interval, no test; Holm leaves it as it is.
    one = evaluate_claims(study[study.seed == 0], [_claim(kind="accuracy_diff", step=10)], "baseline").iloc[0]
    assert (one.verdict, one.holm_verdict) == ("too few seeds", "too few seeds")


def test_summarize_pairs_the_steps_the_reference_has_and_leaves_the_rest_unpaired():
    # A living-pool arm evaluated at its refresh step 15 as well (or an arm with more steps): no KeyError, no
    # difference at a step the baseline was not evaluated at.
    study = _table({"baseline": lambda s, t: 0.2 + 0.01 * t, "living": lambda s, t: 0.25 + 0.01 * t + 0.001 * s})
    extra = study[(study.arm == "living") & (study.step == 10)].assign(step=15)
    summary = summarize(pd.concat([study, extra]), "baseline").set_index(["arm", "step"])
    assert summary.loc[("living", 15)].n_paired == 0 and math.isnan(summary.loc[("living", 15)].diff_mean)
    assert summary.loc[("living", 10)].n_paired == 5 and summary.loc[("living", 10)].diff_mean == pytest.approx(0.052)


def _paired(diffs_by_step, replayed=None):
    """Two arms over 5 seeds, evaluated at steps 0, 10 and 20: `fast` = baseline + diffs_by_step[step][seed];
    `replayed` (step -> rows replayed so far by `fast`, every seed) as the study table records it."""
    rows = []
    for seed in range(5):
        for step in (0, 10, 20):
            base = 0.2 + 0.01 * step + 0.01 * seed
            for arm, accuracy in (("baseline", base), ("fast", base + diffs_by_step.get(step, [0.0] * 5)[seed])):
                done = (replayed or {}).get(step, 0) if arm == "fast" else 0
                rows.append({"arm": arm, "seed": seed, "step": step, "accuracy": accuracy, "replayed": done})
    return pd.DataFrame(rows)


def test_a_claim_before_the_first_replay_of_arms_that_differ_only_in_replay_is_untestable():
    # Response reuse's first replay came at step 13-19: at step 10 it was the baseline's own run in every seed.
    study = _paired({20: [0.01, 0.03, 0.05, 0.07, 0.09]}, replayed={0: 0, 10: 0, 20: 8})
    claims = [_claim(name="at-10", kind="accuracy_diff", step=10), _claim(name="at-20", kind="accuracy_diff", step=20)]
    table = evaluate_claims(study, claims, "baseline", differ_only_in_replay=lambda a, b, step: True).set_index("claim")
    assert table.loc["at-10"].verdict == "untestable: no replay by step 10" and math.isnan(table.loc["at-10"].p_value)
    assert table.loc["at-10"].holm_verdict == "untestable: no replay by step 10"  # outside Holm's family
    assert table.loc["at-20"].verdict == "arm better" and table.loc["at-20"].holm_p == table.loc["at-20"].p_value
    # Arms that differ in more than replay (another learning rate) can differ before any replay: testable.
    other = evaluate_claims(study, claims, "baseline", differ_only_in_replay=lambda a, b, step: False).set_index(
        "claim"
    )
    assert other.loc["at-10"].verdict == "no difference shown"
    # A replay at or before the step (in any seed) makes it testable too.
    study.loc[(study.arm == "fast") & (study.step == 10) & (study.seed == 3), "replayed"] = 2
    again = evaluate_claims(study, claims, "baseline", differ_only_in_replay=lambda a, b, step: True).set_index("claim")
    assert again.loc["at-10"].verdict == "no difference shown"


def test_arms_differ_only_in_replay_when_their_resolved_settings_match_but_for_it(tmp_path):
    from conftest import tiny_study_settings

    from rlep.tasks.settings.study import StudyConfig
    from rlep.tasks.study.report import differ_only_in_replay

    arms = {
        "baseline": {"replay": {"kind": "none"}},
        "reuse": {"replay": {"kind": "reuse"}},
        "fast": {"replay": {"kind": "reuse"}, "optimizer": {"lr": 0.5}},
        "reseeded": {"replay": {"kind": "none"}, "perturb": {"reseed_at": 2}},
    }
    same = differ_only_in_replay(StudyConfig.model_validate(tiny_study_settings("tiny", tmp_path, arms)))
    assert same("reuse", "baseline", 2) and not same("fast", "baseline", 2) and not same("fast", "reuse", 2)
    # The chance control (re-seeded from step 2) is the baseline's run through step 1, and not from step 2 on.
    assert same("reseeded", "baseline", 1) and same("reseeded", "reuse", 1)
    assert not same("reseeded", "baseline", 2) and not same("reseeded", "reuse", 2)


def test_every_claim_shows_the_sd_of_its_differences_and_the_smallest_detectable_difference():
    # Differences 0.01, 0.03, ..., 0.09: sd = sqrt(0.001 / 4) = 0.0316228; at 5 seeds
    # (t_0.975,4 + t_0.8,4) sd / sqrt(5) = (2.7764451 + 0.9409646) x 0.0316228 / 2.2360680 = 0.0525726.
    study = _paired({10: [0.01, 0.03, 0.05, 0.07, 0.09]})
    row = evaluate_claims(study, [_claim(kind="accuracy_diff", step=10)], "baseline").iloc[0]
    assert row.diff_sd == pytest.approx(0.0316228, abs=1e-6)
    assert row.sdd_80 == pytest.approx((2.7764451 + 0.9409646) * 0.0316228 / math.sqrt(5), abs=1e-6)
    assert row.sdd_80 == pytest.approx(0.0525726, abs=1e-6)
    # The real-model study's sd of 0.057 over 5 seeds could detect 0.095, not the 0.05 it was powered for.
    assert smallest_detectable(0.057, 5) == pytest.approx(0.0948, abs=5e-4)
    assert math.isnan(smallest_detectable(0.01, 1))
    # The t test's p-value: mean 0.05 / (sd / sqrt 5) = t 3.5355 on 4 degrees of freedom, p = 0.02410.
    assert (row.test, row.p_value) == ("paired t", pytest.approx(0.02410, abs=1e-4))


def test_holm_adjusts_across_the_studys_testable_claims():
    # Hand-computed: p 0.01, 0.04, 0.03 (and an untestable NaN): 0.01 x 3 = 0.03; 0.03 x 2 = 0.06; 0.04 x 1, but
    # not below the one before: 0.06.
    assert holm([0.01, 0.04, 0.03, math.nan])[:3] == pytest.approx([0.03, 0.06, 0.06])
    assert math.isnan(holm([0.01, 0.04, 0.03, math.nan])[3])
    # Two claims, deviations -0.02..0.02 around 0.021 and 0.019 (sd 0.0158114, t = 2.970 and 2.687 on 4 degrees
    # of freedom): p 0.0411 ("arm better" alone) and 0.0548; Holm: 2 x 0.0411 = 0.0822 for both, no difference.
    spread = np.array([-0.02, -0.01, 0.0, 0.01, 0.02])
    study = _paired({10: list(0.021 + spread), 20: list(0.019 + spread)})
    claims = [_claim(name="a", kind="accuracy_diff", step=10), _claim(name="b", kind="accuracy_diff", step=20)]
    table = evaluate_claims(study, claims, "baseline").set_index("claim")
    assert table.p_value.tolist() == pytest.approx([0.0411, 0.0548], abs=5e-4)
    assert table.loc["a"].verdict == "arm better" and table.loc["a"].holm_verdict == "no difference shown"
    assert table.holm_p.tolist() == pytest.approx([2 * table.loc["a"].p_value] * 2)
    alone = evaluate_claims(study, claims[:1], "baseline").iloc[0]
    assert alone.holm_verdict == "arm better (Holm)" and alone.holm_p == alone.p_value  # a family of one


def test_to_target_compares_ranks_with_a_never_reached_seed_last_and_counts_who_reached():
    # 6 seeds: the arm reaches 0.4 at step 10 in all; the baseline at step 20 in seeds 0-2 and never in 3-5 (a
    # 0-filled or dropped seed would hide that). Every seed the arm ranks first: sign test 6 of 6, p = 2 / 64.
    rows = [
        {"arm": arm, "seed": seed, "step": step, "accuracy": acc}
        for seed in range(6)
        for step in (0, 10, 20)
        for arm, acc in (
            ("fast", 0.2 + 0.02 * step),
            ("baseline", 0.2 + (0.01 * step if seed < 3 else 0.005 * step)),
        )
    ]
    row = evaluate_claims(pd.DataFrame(rows), [_claim(kind="steps_to_target", target=0.4)], "baseline").iloc[0]
    assert (row.arm_reached, row.against_reached) == (6, 3)
    assert (row.test, row.p_value) == ("sign test, censored last", pytest.approx(2 / 64))
    assert row.verdict == "arm better (sign test, censored last)"
    assert row.diff_per_seed == "0: -10, 1: -10, 2: -10, 3: -11, 4: -11, 5: -11"  # descriptive, censored at 20 + 1


def _charged(study, overhead):
    """`study` with tokens_charged: each arm's own tokens plus `overhead[arm](seed)` (its dependencies)."""
    extra = [overhead.get(arm, lambda seed: 0)(seed) for arm, seed in zip(study.arm, study.seed)]
    return study.assign(tokens_charged=study.tokens_generated + np.asarray(extra, dtype=float))


def _equal_charge_study():
    """100 tokens a step in both arms, the arm charged 1000 more for what it depends on; its claims at equal charge
    (`eq`) and step for step (`at-20`), both by the baseline's step 20."""
    study = _charged(
        _table({"baseline": lambda s, t: 0.2 + 0.01 * t, "fast": lambda s, t: 0.2 + 0.025 * t + 0.001 * s}),
        {"fast": lambda seed: 1000},
    )
    claims = [
        _claim(name="eq", kind="accuracy_at_equal_charge", step=20),
        _claim(name="at-20", kind="accuracy_diff", step=20),
    ]
    return study, claims


def test_at_equal_charge_the_arm_is_read_where_it_had_spent_the_against_arms_tokens():
    # 100 tokens a step in both arms; the arm is charged 1000 more for what it depends on: the baseline's 2000 by
    # step 20 buy the arm its step 10 (1000 + 1000), ahead of the baseline's step 20 by 0.05 + 0.001 x seed.
    study, claims = _equal_charge_study()
    table = evaluate_claims(study, claims, "baseline").set_index("claim")
    equal = table.loc["eq"]
    assert equal.diff_mean == pytest.approx(0.052) and equal.n_paired == 5 and equal.unpaired == ""
    assert equal.verdict == "arm better" and equal.test == "paired t"
    assert "0: 0.450 (step 10, 2,000 of 2,000)" in equal.arm_per_seed and "0: 0.400" in equal.against_per_seed
    assert table.loc["at-20"].diff_mean == pytest.approx(0.302)  # step for step the arm is further ahead
    # Charged 1500 more, the arm's step 10 (2500) is over the budget: its step 0 is what it had, and it is behind.
    costly = evaluate_claims(_charged(study, {"fast": lambda seed: 1500}), claims[:1], "baseline").iloc[0]
    assert "0: 0.200 (step 0, 1,500 of 2,000)" in costly.arm_per_seed and costly.verdict == "arm worse"
    assert costly.holm_verdict == "arm worse (Holm)"  # a family of one: Holm keeps the direction


def test_at_equal_charge_a_seed_whose_arm_spent_the_budget_before_its_first_evaluation_is_named_not_counted():
    base = _table({"baseline": lambda s, t: 0.2 + 0.01 * t, "fast": lambda s, t: 0.3 + 0.01 * t + 0.001 * s})
    claim = [_claim(kind="accuracy_at_equal_charge", step=20)]
    # Seeds 3 and 4 depend on 2500 tokens, more than the baseline's 2000 by step 20: no model within the budget.
    some = evaluate_claims(_charged(base, {"fast": lambda seed: 2500 * (seed >= 3)}), claim, "baseline").iloc[0]
    assert some.n_paired == 3 and some.unpaired == "arm over the budget at its first evaluation: 3, 4"
    assert "3: over the budget (2,000) at its first evaluation" in some.arm_per_seed
    assert some.diff_mean == pytest.approx(0.3 + 0.2 + 0.001 - 0.4)  # 0.101 + step 20's 0.2 - the baseline's 0.4
    every = evaluate_claims(_charged(base, {"fast": lambda seed: 2500}), claim, "baseline").iloc[0]
    assert every.n_paired == 0 and every.verdict == "untestable: the arm is over the budget in every seed"
    assert math.isnan(every.p_value) and math.isnan(every.holm_p)
    with pytest.raises(ValueError, match="'baseline' was not evaluated at step 15"):
        evaluate_claims(_charged(base, {}), [_claim(kind="accuracy_at_equal_charge", step=15)], "baseline")


def test_the_claims_table_says_where_the_arm_was_read_at_equal_charge():
    from rlep.tasks.study.report import claims_markdown

    study, claims = _equal_charge_study()
    text = claims_markdown(evaluate_claims(study, claims, "baseline"))
    assert "| eq | fast vs baseline | accuracy at the tokens charged to baseline by step 20 | 5 |" in text
    assert "- eq: fast 0: 0.450 (step 10, 2,000 of 2,000)" in text and "At equal charge: per seed" in text
    assert "Steps and tokens to a target" not in text  # no to-target claim, no note about them


def test_real_room_re_read_with_todays_statistics_gives_the_figures_the_readme_quotes(capsys):
    """docs/study-runs/real-room-2026-11-27/reread.py, from the per-seed values of the report kept there."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[3] / "docs" / "study-runs" / "real-room-2026-11-27" / "reread.py"
    spec = importlib.util.spec_from_file_location("reread", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main()
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip().startswith(("rlep-", "reuse-"))}
    assert "0.057   0.094    0.174" in rows["rlep-ahead-at-10"] and "0.347" in rows["rlep-ahead-at-10"]
    assert "0.062   0.104    0.053" in rows["rlep-ahead-at-end"] and "0.158" in rows["rlep-ahead-at-end"]
    assert "untestable: no replay by step 10" in rows["reuse-ahead-at-10"]
    assert "0.079   0.131    0.175" in rows["reuse-ahead-at-end"]
    assert "RLEP in 1" in out and "p 0.375; untestable: 5 paired seeds" in out
