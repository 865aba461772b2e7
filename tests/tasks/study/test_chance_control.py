"""A study's chance control: an arm that is the baseline re-seeded from a step (`perturb: {reseed_at: R}`), planned
as an ordinary run of every seed, and named by claims as `against`."""

import pandas as pd
import pytest
import yaml
from conftest import tiny_study_settings

from rlep.data.run_layout import StudyLayout, TrainRunLayout
from rlep.flows.options import build_config
from rlep.tasks.study import StudyConfig, StudyError, plan
from rlep.tasks.study.control import compare_before, control_arms, control_check, control_markdown

ARMS = {
    "grpo": {"replay": {"kind": "none"}},
    "grpo-reseeded": {"perturb": {"reseed_at": 2}},
    "rlep": {"replay": {"kind": "rlep"}},
}
CLAIM = {"name": "rlep-beats-chance", "arm": "rlep", "against": "grpo-reseeded", "kind": "accuracy_diff", "step": 2}


def _study(tmp_path, arms=ARMS, **extra):
    path = tmp_path / "study.yaml"
    settings = tiny_study_settings("tiny", tmp_path / "out", arms, **{"baseline_arm": "grpo", **extra})
    path.write_text(yaml.safe_dump(settings))
    return build_config(StudyConfig, path)


def test_the_control_is_the_baseline_of_each_seed_reseeded_from_its_step(tmp_path):
    config = _study(tmp_path, claims=[CLAIM])
    runs = {run.key: run for run in plan(config)}
    for seed in config.seeds:
        grpo, control = runs[f"grpo/seed-{seed}"].config, runs[f"grpo-reseeded/seed-{seed}"].config
        assert runs[f"grpo-reseeded/seed-{seed}"].needs == []  # it reruns the steps before R: it waits for nothing
        assert control.model_dump(exclude={"perturb", "out"}) == grpo.model_dump(exclude={"perturb", "out"})
        assert control.sampling_seed(1) == grpo.sampling_seed(1)
        assert control.sampling_seed(2) != grpo.sampling_seed(2)
    assert config.claims[0].against == "grpo-reseeded"


def test_a_control_that_would_never_be_reseeded_or_is_misspelled_is_refused_naming_its_arm(tmp_path):
    with pytest.raises(StudyError, match=r"arms\.grpo-reseeded.*reseed_at \(3\) is after the last step \(2\)"):
        plan(_study(tmp_path, {**ARMS, "grpo-reseeded": {"perturb": {"reseed_at": 3}}}))
    with pytest.raises(StudyError, match=r"arms\.grpo-reseeded\.perturb\.reseed: not a setting"):
        plan(_study(tmp_path, {**ARMS, "grpo-reseeded": {"perturb": {"reseed": 2}}}))


def _write_run(out, arm, seed, rewards, evals):
    """A run's metrics (a reward and a wall-clock time per step) and evaluations (avg@k per evaluated step)."""
    layout = TrainRunLayout(StudyLayout(out).run(arm, seed))
    layout.root.mkdir(parents=True)
    steps = range(1, len(rewards) + 1)
    pd.DataFrame(
        {"step": steps, "reward_mean": rewards, "time_step": [float(arm == "grpo")] * len(rewards)}
    ).to_parquet(layout.metrics)
    pd.DataFrame(
        {"step": list(evals), "data_source": "all", "avg_at_k": list(evals.values()), "pass_at_k": 0.5, "maj_at_k": 0.5}
    ).to_parquet(layout.eval)


def test_the_report_says_seed_by_seed_whether_the_control_was_its_baseline_before_its_step(tmp_path):
    four = {arm: {**settings, "steps": 4} for arm, settings in ARMS.items()}
    config = _study(tmp_path, {**four, "grpo-reseeded": {"perturb": {"reseed_at": 3}, "steps": 4}})
    assert control_arms(config) == [("grpo-reseeded", "grpo", 3)]  # rlep differs in replay: not its baseline
    out = config.out
    _write_run(out, "grpo", 0, [0.1, 0.2], {0: 0.1, 1: 0.2, 2: 0.3})
    _write_run(out, "grpo-reseeded", 0, [0.1, 0.2], {0: 0.1, 1: 0.2, 2: 0.3})  # times differ: not compared
    _write_run(out, "grpo", 1, [0.1, 0.2], {0: 0.1, 1: 0.2, 2: 0.3})
    _write_run(out, "grpo-reseeded", 1, [0.1, 0.2], {0: 0.1, 1: 0.25, 2: 0.3})  # its evaluation after step 1
    table = control_check(config).set_index("seed")
    assert table.loc[0, ["parted_at", "steps_compared", "evals_compared", "complete"]].tolist() == [-1, 2, 3, True]
    assert table.loc[1, ["parted_at", "parted_in", "control_value", "baseline_value"]].tolist() == [
        1,
        "evaluation avg_at_k (all)",
        0.25,
        0.2,
    ]
    text = control_markdown(config, table.reset_index())
    assert "- `grpo-reseeded` is `grpo` re-seeded from step 3:" in text
    assert "  - seed 0: the same at steps 1-2 (every metric but wall-clock times) and at 3 evaluation(s)" in text
    assert (
        "  - seed 1: **parted at step 1**, before its re-seed step: evaluation avg_at_k (all) 0.25 against 0.2." in text
    )
    assert "1 control run(s) parted from their baseline before re-seeding" in text


def test_a_control_without_a_baseline_arm_is_said_and_a_study_without_one_has_no_section(tmp_path):
    config = _study(
        tmp_path, {"grpo-reseeded": {"perturb": {"reseed_at": 2}}, "rlep": ARMS["rlep"]}, baseline_arm="rlep"
    )
    assert control_arms(config) == [("grpo-reseeded", None, 2)]
    assert "no arm has its settings without `perturb`" in control_markdown(config, control_check(config))
    (tmp_path / "plain").mkdir()
    plain = _study(tmp_path / "plain", {"grpo": ARMS["grpo"], "rlep": ARMS["rlep"]})
    assert control_arms(plain) == [] and control_markdown(plain, control_check(plain)) is None


def _pair(tmp_path, control_metrics=None, control_evals=None):
    """A baseline run (3 steps, a NaN column as replay's in a run without replay, evaluations at 0 and 2) and a
    control that is the same but for what is given."""
    metrics = {"step": [1, 2, 3], "reward_mean": [0.1, 0.2, 0.3], "replay_share": [float("nan")] * 3}
    evals = {"step": [0, 2], "data_source": "all", "avg_at_k": [0.1, 0.2], "pass_at_k": 0.5, "maj_at_k": 0.5}
    roots = []
    for name, m, e in (("base", metrics, evals), ("control", control_metrics or metrics, control_evals or evals)):
        layout = TrainRunLayout(tmp_path / name)
        layout.root.mkdir(parents=True)
        pd.DataFrame(m).to_parquet(layout.metrics)
        pd.DataFrame(e).to_parquet(layout.eval)
        roots.append(layout.root)
    return roots


def _parted(found):
    return found["parted_at"], found["parted_in"]


def test_the_check_reads_every_step_and_value_before_r_in_order(tmp_path):
    base, control = _pair(tmp_path / "same")
    found = compare_before(base, control, 3)
    assert _parted(found) == (-1, "") and found["evals_compared"] == 2  # NaN against NaN is the same
    # The evaluation of the starting weights (step 0) is compared too.
    evals = {"step": [0, 2], "data_source": "all", "avg_at_k": [0.15, 0.2], "pass_at_k": 0.5, "maj_at_k": 0.5}
    assert _parted(compare_before(*_pair(tmp_path / "start", control_evals=evals), 3)) == (
        0,
        "evaluation avg_at_k (all)",
    )
    # pass@k alone differing parts them.
    evals = {"step": [0, 2], "data_source": "all", "avg_at_k": [0.1, 0.2], "pass_at_k": [0.5, 0.75], "maj_at_k": 0.5}
    assert _parted(compare_before(*_pair(tmp_path / "pass", control_evals=evals), 3)) == (
        2,
        "evaluation pass_at_k (all)",
    )
    # At one step the training comes before the evaluation of its weights.
    metrics = {"step": [1, 2, 3], "reward_mean": [0.1, 0.25, 0.3], "replay_share": [float("nan")] * 3}
    found = compare_before(*_pair(tmp_path / "both", control_metrics=metrics, control_evals=evals), 3)
    assert _parted(found) == (2, "reward_mean") and (found["control_value"], found["baseline_value"]) == (0.25, 0.2)


def test_each_of_two_controls_is_compared_with_the_plain_arm_not_the_other_control(tmp_path):
    arms = {"rlep": ARMS["rlep"], "again-2": {"perturb": {"reseed_at": 2}}, "again-3": {"perturb": {"reseed_at": 3}}}
    four = {arm: {**settings, "steps": 4} for arm, settings in {**arms, "grpo": ARMS["grpo"]}.items()}
    config = _study(tmp_path, four, baseline_arm="rlep")
    assert control_arms(config) == [("again-2", "grpo", 2), ("again-3", "grpo", 3)]


def test_a_control_not_yet_past_its_branch_says_how_far_it_was_compared(tmp_path):
    four = {arm: {**settings, "steps": 4} for arm, settings in ARMS.items()}
    config = _study(tmp_path, {**four, "grpo-reseeded": {"perturb": {"reseed_at": 3}, "steps": 4}})
    _write_run(config.out, "grpo", 0, [0.1, 0.2], {0: 0.1})
    _write_run(config.out, "grpo-reseeded", 0, [0.1], {0: 0.1})  # killed after its first step
    table = control_check(config)
    assert table.loc[0, ["steps_compared", "complete"]].tolist() == [1, False]
    text = control_markdown(config, table)
    assert "  - seed 0: the same at 1 of its 2 steps (every metric but wall-clock times)" in text
    assert "; the rest is not run yet." in text
