"""`rlep study`: the plan (RLEP's exploration and pool shared per seed), one clear error for a bad arm before
anything runs, a tiny study run here and resumed, and the same under a local Ray through prefect-ray."""

import json

import pandas as pd
import pytest
from conftest import flow_run_logs, tiny_study_settings

from rlep.flows.cli import main
from rlep.tasks.study import StudyConfig, StudyError, plan, run_study

ARMS = {"baseline": {"replay": {"kind": "none"}}, "rlep": {"replay": {"kind": "rlep"}}}


def test_plan_shares_exploration_and_pool_per_seed(tmp_path):
    runs = {
        r.key: r
        for r in plan(
            StudyConfig.model_validate(
                tiny_study_settings(
                    "tiny", tmp_path, {**ARMS, "fifo": {"replay": {"kind": "fifo", "replay_ratio": 0.5}}}
                )
            )
        )
    }
    assert list(runs) == [
        "baseline/seed-0",
        "collect/seed-0",
        "rlep/seed-0",
        "fifo/seed-0",
        "baseline/seed-1",
        "collect/seed-1",
        "rlep/seed-1",
        "fifo/seed-1",
    ]
    assert runs["collect/seed-1"].needs == ["baseline/seed-1"] and runs["rlep/seed-1"].needs == ["collect/seed-1"]
    assert runs["rlep/seed-1"].config.replay.pool == tmp_path / "collect" / "seed-1" / "pool.parquet"
    assert runs["fifo/seed-1"].config.seed == 1 and runs["fifo/seed-1"].config.replay.replay_ratio == 0.5
    assert runs["fifo/seed-1"].config.samples_per_prompt == 4  # the base settings stay under an override
    # A baseline that is not plain GRPO of the same length cannot be the exploration: a separate run explores.
    other = plan(StudyConfig.model_validate(tiny_study_settings("tiny", tmp_path, ARMS, explore_steps=5)))
    assert [r.key for r in other][:3] == ["explore/seed-0", "collect/seed-0", "baseline/seed-0"] and other[
        0
    ].config.steps == 5


def test_arms_that_make_different_numbers_of_updates_are_refused(tmp_path):
    # 3 prompts x 4 answers in mini-batches of 3 prompts: one update a step for the baseline and rlep; FIFO's
    # batch of 12 / (1 - 0.5) = 24 rollouts is 6 prompts' worth, two updates (it divides, and is still unfair).
    arms = {**ARMS, "fifo": {"replay": {"kind": "fifo", "replay_ratio": 0.5}}}
    settings = tiny_study_settings("tiny", tmp_path, arms)
    settings["train"]["mini_batch_prompts"] = 3
    with pytest.raises(StudyError, match=r"optimizer updates per step differ: baseline 1, rlep 1, fifo 2"):
        plan(StudyConfig.model_validate(settings))
    assert plan(StudyConfig.model_validate({**settings, "equal_updates": False}))  # a study of the update count


def test_a_claim_at_a_step_an_arm_does_not_evaluate_is_refused_at_load(tmp_path):
    # 30 steps evaluated every 10 (and at 0 and the end): a claim at step 15 used to fail only in the report,
    # after every run; an arm with 20 steps is not evaluated at 30 either.
    settings = tiny_study_settings("tiny", tmp_path, ARMS)
    settings["train"].update(steps=30, eval_every=10)
    for step in (0, 10, 30):
        StudyConfig.model_validate(
            {**settings, "claims": [{"name": "c", "arm": "rlep", "kind": "accuracy_diff", "step": step}]}
        )
    claim = {"name": "mid", "arm": "rlep", "kind": "accuracy_diff", "step": 15}
    with pytest.raises(
        ValueError,
        match=r"claims.mid: step 15 is not evaluated in arm 'rlep' \(steps 30, eval_every 10: 0, 10, 20, 30\)",
    ):
        StudyConfig.model_validate({**settings, "claims": [claim]})
    shorter = {**settings, "arms": {**ARMS, "rlep": {"replay": {"kind": "rlep"}, "steps": 20}}}
    with pytest.raises(ValueError, match=r"claims.end: step 30 is not evaluated in arm 'rlep' \(steps 20"):
        StudyConfig.model_validate({**shorter, "claims": [{**claim, "name": "end", "step": 30}]})
    # At equal charge the step is the against arm's only: the arm is read wherever it had spent as much.
    equal = {"name": "eq", "arm": "rlep", "kind": "accuracy_at_equal_charge", "step": 30}
    StudyConfig.model_validate({**shorter, "claims": [equal]})
    with pytest.raises(ValueError, match=r"claims.eq: step 15 is not evaluated in arm 'baseline' \(steps 30"):
        StudyConfig.model_validate({**shorter, "claims": [{**equal, "step": 15}]})


CODE = {"commit": "a" * 40, "dirty": False}


def _started(out):
    """Make the study's baseline seed-0 run look started (it has written a file)."""
    (out / "runs" / "baseline" / "seed-0").mkdir(parents=True, exist_ok=True)
    (out / "runs" / "baseline" / "seed-0" / "metrics.parquet").write_text("")


def test_the_claims_are_recorded_when_the_study_starts_and_refused_when_changed_after_runs(tmp_path):
    from rlep.tasks.study.claims import fix_record

    claims = [{"name": "end", "arm": "rlep", "kind": "accuracy_diff", "step": 2}]
    config = StudyConfig.model_validate(tiny_study_settings("tiny", tmp_path, ARMS, claims=claims))
    runs = plan(config)
    record = fix_record(config, runs, code=CODE)
    saved = json.loads((tmp_path / "claims.json").read_text())
    assert saved["digest"] == record.digest and saved["plan"]["claims"][0]["against"] == "baseline"
    assert not saved["fixed_after_runs"]
    moved = StudyConfig.model_validate(tiny_study_settings("tiny", tmp_path, ARMS, claims=[{**claims[0], "step": 1}]))
    (tmp_path / "runs" / "rlep" / "seed-1").mkdir(parents=True)  # a run's directory, empty: it has not started
    assert fix_record(moved, runs, code=CODE).digest != record.digest  # nothing ran yet: the claims may still change
    fix_record(config, runs, code=CODE)
    _started(tmp_path)
    assert fix_record(config, runs, code=CODE).digest == record.digest  # the same claims: the study goes on
    with pytest.raises(StudyError, match=r"study plan changed after runs exist .*claims: end: step 2 -> 1"):
        fix_record(moved, runs, code=CODE)


def test_the_record_covers_the_whole_plan_and_the_code_version(tmp_path):
    from rlep.tasks.study.claims import fix_record

    settings = tiny_study_settings("tiny", tmp_path, ARMS)
    config = StudyConfig.model_validate(settings)
    record = fix_record(config, plan(config), code=CODE)
    saved = json.loads((tmp_path / "claims.json").read_text())
    assert saved["version"] == 2 and saved["code"] == CODE and saved["plan"]["seeds"] == [0, 1]
    assert saved["plan"]["arms"]["rlep"]["steps"] == 2 and saved["plan"]["arms"]["rlep"]["replay"]["kind"] == "rlep"
    assert "seed" not in saved["plan"]["arms"]["rlep"] and saved["plan"]["evaluation"]["samples"] == 2
    assert saved["plan"]["arms"]["baseline"]["eval_problems"]["limit"] == 4  # the evaluation set
    assert saved["plan"]["runs"][:3] == ["baseline/seed-0", "collect/seed-0", "rlep/seed-0"]
    _started(tmp_path)
    # Once a run exists, each part of the plan is refused when it changes, in one line naming the change.
    changed = [
        ({"seeds": [0, 1, 2]}, r"seeds \[0, 1\] -> \[0, 1, 2\]"),
        ({"arms": {**ARMS, "rlep": {"replay": {"kind": "rlep"}, "steps": 4}}}, r"arms\.rlep\.steps 2 -> 4"),
        ({"evaluate": {"samples": 3}}, r"evaluation\.samples 2 -> 3"),
        ({"explore_steps": 1}, r"explore_steps None -> 1"),
        ({"collect": {**settings["collect"], "samples_per_prompt": 3}}, r"collect\.samples_per_prompt 2 -> 3"),
        ({"baseline_arm": "rlep"}, r"baseline_arm baseline -> rlep"),
        (
            {"train": {**settings["train"], "eval_problems": {**settings["train"]["eval_problems"], "limit": 8}}},
            r"arms\.baseline\.eval_problems\.limit 4 -> 8",
        ),
    ]
    for change, named in changed:
        other = StudyConfig.model_validate({**settings, **change})
        with pytest.raises(
            StudyError, match=r"^study plan changed after runs exist \(1, e\.g\. baseline/seed-0\): .*" + named
        ) as err:
            fix_record(other, plan(other), code=CODE)
        assert "\n" not in str(err.value) and f"digest {record.digest[:12]}" in str(err.value)
    with pytest.raises(StudyError, match=r"code a{12} \(clean\) -> b{12} \(dirty\)"):
        fix_record(config, plan(config), code={"commit": "b" * 40, "dirty": True})
    # A report runs nothing: other code is stated there, not refused; a changed plan still is.
    assert fix_record(config, plan(config), running=False, code={"commit": "b" * 40, "dirty": True}) == record
    assert json.loads((tmp_path / "claims.json").read_text()) == saved  # nothing was rewritten
    # What a finished run keeps of its checkpoints is not part of the plan: switching it is no change of the study.
    kept = StudyConfig.model_validate({**settings, "finished_runs_keep": "all"})
    assert fix_record(kept, plan(kept), code=CODE) == record
    more = StudyConfig.model_validate({**settings, "seeds": [0, 1, 2]})
    with pytest.raises(StudyError, match=r"seeds \[0, 1\] -> \[0, 1, 2\]; code a{12} \(clean\) -> b{12}"):
        fix_record(more, plan(more), running=False, code={"commit": "b" * 40, "dirty": True})


def test_a_plan_recorded_after_runs_existed_is_marked_and_the_report_says_so(tmp_path, monkeypatch):
    from rlep.tasks.study.claims import fix_record, provenance_markdown

    config = StudyConfig.model_validate(tiny_study_settings("tiny", tmp_path, ARMS))
    _started(tmp_path)  # runs from before the study kept a record
    assert fix_record(config, plan(config), code=CODE).fixed_after_runs
    monkeypatch.setattr("rlep.tasks.study.claims.code_version", lambda: CODE)
    text = provenance_markdown(config)
    assert "the plan was recorded at" in text and "after runs of the study existed" in text
    assert "This report was written under code" not in text  # the recorded code
    monkeypatch.setattr("rlep.tasks.study.claims.code_version", lambda: {"commit": "c" * 40, "dirty": False})
    assert "This report was written under code cccccccccccc (clean)." in provenance_markdown(config)


def test_an_amendment_applies_once_to_the_digest_it_names_and_the_report_prints_it(tmp_path):
    from rlep.tasks.study.claims import StudyRecord, fix_record, provenance_markdown

    settings = tiny_study_settings("tiny", tmp_path, ARMS)
    config = StudyConfig.model_validate(settings)
    record = fix_record(config, plan(config), code=CODE)
    _started(tmp_path)
    wrong = StudyConfig.model_validate(
        {**settings, "seeds": [0, 1, 2], "amendments": [{"of": "0" * 12, "reason": "x"}]}
    )
    with pytest.raises(StudyError, match="study plan changed"):  # an amendment of another record does not apply
        fix_record(wrong, plan(wrong), code=CODE)
    amend = [{"of": record.digest[:12], "reason": "a third seed, for power"}]
    more = StudyConfig.model_validate({**settings, "seeds": [0, 1, 2], "amendments": amend})
    amended = fix_record(more, plan(more), code=CODE)
    assert amended.digest != record.digest and amended.plan["seeds"] == [0, 1, 2]
    (note,) = StudyRecord.read(tmp_path).amendments
    assert note["of"] == record.digest and note["reason"] == "a third seed, for power"
    assert "seeds [0, 1] -> [0, 1, 2]" in note["changes"]
    assert fix_record(more, plan(more), code=CODE) == amended  # the same plan goes on
    four = StudyConfig.model_validate({**settings, "seeds": [0, 1, 2, 3], "amendments": amend})
    with pytest.raises(StudyError, match=r"seeds \[0, 1, 2\] -> \[0, 1, 2, 3\]"):  # used once: not again
        fix_record(four, plan(four), code=CODE)
    text = provenance_markdown(more)
    assert f"Amended at {note['at']}" in text and "a third seed, for power" in text
    assert f"digest {record.digest[:12]} -> {amended.digest[:12]}" in text
    # A second amendment, of the amended digest: both are kept, in order.
    again = [*amend, {"of": amended.digest[:12], "reason": "a fourth seed"}]
    four = StudyConfig.model_validate({**settings, "seeds": [0, 1, 2, 3], "amendments": again})
    fix_record(four, plan(four), code=CODE)
    assert [n["reason"] for n in StudyRecord.read(tmp_path).amendments] == ["a third seed, for power", "a fourth seed"]


def test_a_claims_only_record_of_the_earlier_form_still_loads_and_says_so(tmp_path):
    from rlep.tasks.study.claims import StudyRecord, claims_of, fix_record, provenance_markdown

    claims = [{"name": "end", "arm": "rlep", "kind": "accuracy_diff", "step": 2}]
    config = StudyConfig.model_validate(tiny_study_settings("tiny", tmp_path, ARMS, claims=claims))
    recorded, digest = claims_of(config)
    old = {"claims": recorded, "digest": digest, "recorded_at": "2026-11-26T12:39:00+00:00", "fixed_after_runs": False}
    (tmp_path / "claims.json").write_text(json.dumps(old))
    _started(tmp_path)
    record = fix_record(config, plan(config), code=CODE)
    assert record.claims_only and record.digest == digest and record == StudyRecord.read(tmp_path)
    assert json.loads((tmp_path / "claims.json").read_text()) == old  # read, not rewritten
    assert "claims-only record" in provenance_markdown(config) and "digest " + digest[:12] in provenance_markdown(
        config
    )
    moved = StudyConfig.model_validate(tiny_study_settings("tiny", tmp_path, ARMS, claims=[{**claims[0], "step": 1}]))
    with pytest.raises(StudyError, match=r"^claims changed after runs exist .*end: step 2 -> 1"):
        fix_record(moved, plan(moved), code=CODE)
    # With no run yet, a whole record replaces it.
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "claims.json").write_text(json.dumps(old))
    config = StudyConfig.model_validate(tiny_study_settings("tiny", fresh, ARMS, claims=claims))
    assert not fix_record(config, plan(config), code=CODE).claims_only


def test_claims_are_tested_only_when_every_run_of_the_plan_has_finished(tmp_path):
    from rlep.tasks.study.report import write_study_outputs

    claims = [{"name": "end", "arm": "rlep", "kind": "accuracy_diff", "step": 2}]
    config = StudyConfig.model_validate(tiny_study_settings("tiny", tmp_path, ARMS, claims=claims))
    rows = [
        {"arm": arm, "seed": seed, "step": step, "accuracy": 0.1 * step + 0.01 * seed + (arm == "rlep") * 0.05}
        for arm in ARMS
        for seed in (0, 1)
        for step in (0, 1, 2)
        if not (arm == "rlep" and seed == 1 and step == 2)  # rlep's seed 1 stopped after step 1
    ]
    study = pd.DataFrame(rows).assign(
        tokens_generated=0.0, tokens_charged=0.0, wall_seconds=0.0, seconds_charged=0.0, optimizer_updates=0.0
    )
    final = pd.DataFrame(columns=["arm", "seed", "k", "avg_at_k", "pass_at_k", "maj_at_k"])
    paths = write_study_outputs(config, study, final)
    report = paths["report"].read_text()
    assert "Not tested yet: 3 of 4 training runs have finished (1 missing)" in report
    assert "claims" not in paths and not (tmp_path / "claims.parquet").exists()
    study = pd.concat([study, study[(study.arm == "rlep") & (study.seed == 1) & (study.step == 1)].assign(step=2)])
    paths = write_study_outputs(config, study, final)
    assert pd.read_parquet(paths["claims"]).claim.tolist() == ["end"]


def test_an_arm_setting_for_another_kind_of_source_is_refused(tmp_path):
    settings = tiny_study_settings("tiny", tmp_path, ARMS)
    settings["train"]["problems"] = {"source": str(tmp_path / "mine.jsonl")}
    settings["arms"] = {**ARMS, "rlep": {**ARMS["rlep"], "problems": {"families": ["add"]}}}
    with pytest.raises(StudyError, match=r"arms\.rlep\.problems\.families: not a setting of kind 'file'"):
        plan(StudyConfig.model_validate(settings))


def test_a_bad_arm_is_one_clear_error_before_anything_runs(tmp_path, capsys):
    with pytest.raises(
        StudyError, match=r"arms\.fifo\.replay\.replay_ratioo: not a setting of kind 'fifo' \(got 0\.5\)"
    ):
        plan(
            StudyConfig.model_validate(
                tiny_study_settings(
                    "tiny", tmp_path, {**ARMS, "fifo": {"replay": {"kind": "fifo", "replay_ratioo": 0.5}}}
                )
            )
        )
    path = tmp_path / "study.yaml"
    path.write_text(json.dumps(tiny_study_settings("tiny", tmp_path / "out", {"baseline": {"lr": 1}})))
    assert main(["study", "--config", str(path), "--no-prefect"]) == 2
    # One error format for every command: the file, then each bad setting's path, message and value.
    assert f"{path}: invalid configuration: arms.baseline.lr: not a setting (got 1); did you mean optimizer.lr?" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"arms": {**ARMS, "../../escaped": {}}}, "arms: '../../escaped' cannot name an arm: it names the arm's"),
        ({"arms": {**ARMS, "rlep/v2": {}}}, "arms: 'rlep/v2' cannot name an arm"),
        ({"arms": {**ARMS, "collect": {}}}, "arms: 'collect' is the name of the study's own collect runs"),
        ({"arms": {**ARMS, "explore": {}}}, "arms: 'explore' is the name of the study's own explore runs"),
        ({"seeds": [0, -1]}, "seeds.1: Input should be greater than or equal to 0"),
        ({"seeds": [0, True]}, "invalid configuration: seeds[1]: a number, not true"),  # was seeds 0 and 1
        ({"arms": {**ARMS, "one": {"steps": True}}}, "invalid configuration: arms.one.steps: a number, not true"),
        (
            {"claims": [{"name": "c", "arm": "rlep", "kind": "accuracy_diff", "step": 1}] * 2},
            "claims: names repeat: c",
        ),
        (
            {"claims": [{"name": "c", "arm": "rlep", "against": "rlep", "kind": "accuracy_diff", "step": 1}]},
            "claims.c: compares arm 'rlep' with itself",
        ),
    ],
    ids=[
        "escaping-arm",
        "nested-arm",
        "collect-arm",
        "explore-arm",
        "negative-seed",
        "boolean-seed",
        "boolean-steps-of-an-arm",
        "claim-twice",
        "self-claim",
    ],
)
def test_a_study_that_would_run_the_wrong_thing_is_refused(tmp_path, capsys, change, message):
    # Arm names became run keys and directories unchecked: `collect` made two runs keyed collect/seed-0, `explore`
    # dropped the arm from the plan, `../../escaped` trained outside the study.
    path = tmp_path / "study.yaml"
    path.write_text(json.dumps({**tiny_study_settings("tiny", tmp_path / "out", ARMS), **change}))
    assert main(["study", "--config", str(path), "--no-prefect"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("invalid configuration") <= 1
    assert not (tmp_path / "out").exists()


def test_a_report_of_a_study_with_no_run_finished_is_refused_naming_it(fixture_model, tmp_path, capsys):
    path = tmp_path / "study.yaml"
    path.write_text(json.dumps(tiny_study_settings(fixture_model, tmp_path / "out", ARMS)))
    assert main(["study", "--config", str(path), "--report-only"]) == 2
    err = capsys.readouterr().err
    assert (
        f"{path}: no arm's training run of the study in {tmp_path / 'out'} has finished yet: nothing to report" in err
    )
    assert not (tmp_path / "out" / "report.md").exists()


def test_a_report_with_only_the_exploration_finished_is_refused_the_same_way(fixture_model, tmp_path, monkeypatch):
    """A separate exploration run (explore_steps) is not an arm: finished alone, there is still nothing to report."""
    import rlep.tasks.study as study

    monkeypatch.setattr(study, "finished_record", lambda run, hashes=None, **_: {} if run.arm is None else None)
    config = StudyConfig.model_validate(tiny_study_settings(fixture_model, tmp_path / "out", ARMS, explore_steps=1))
    assert plan(config)[0].key == "explore/seed-0"
    with pytest.raises(StudyError, match="no arm's training run of the study .* has finished yet"):
        study.report_study(config)


@pytest.mark.slow
def test_a_tiny_study_runs_rlep_in_order_and_resumes(fixture_model, tmp_path, half_right_collection, monkeypatch):
    claims = [{"name": "rlep-ahead-at-end", "arm": "rlep", "kind": "accuracy_diff", "step": 2}]
    # In this process (isolate off): the patched collection engine must be the one that runs.
    settings = tiny_study_settings(fixture_model, tmp_path / "study", ARMS, claims=claims, runner={"isolate": False})
    config = StudyConfig.model_validate(settings)
    monkeypatch.setattr("rlep.tasks.study.claims.code_version", lambda: CODE)  # a commit meanwhile: no refusal here
    paths = run_study(config, progress=False)
    study = pd.read_parquet(paths["study"])
    assert set(study.columns) >= {
        "arm",
        "seed",
        "step",
        "accuracy",
        "tokens_generated",
        "wall_seconds",
        "tokens_charged",
        "seconds_charged",
        "optimizer_updates",
    }
    # RLEP is charged its exploration (the baseline's own run) and its collection; the baseline nothing extra.
    base = study[(study.arm == "baseline")]
    assert (base.tokens_charged == base.tokens_generated).all()
    rlep = study[study.arm == "rlep"]
    end = {arm: t[t.step == 2].set_index("seed") for arm, t in (("baseline", base), ("rlep", rlep))}
    assert (end["rlep"].tokens_charged > end["rlep"].tokens_generated + end["baseline"].tokens_generated).all()
    assert (rlep.optimizer_updates == base.optimizer_updates.to_numpy()).all()  # equal updates at every step
    assert sorted(set(zip(study.arm, study.seed))) == [("baseline", 0), ("baseline", 1), ("rlep", 0), ("rlep", 1)]
    summary = pd.read_parquet(paths["summary"])
    assert set(summary.columns) >= {
        "arm",
        "step",
        "n_seeds",
        "mean",
        "ci_low",
        "ci_high",
        "diff_mean",
        "diff_ci_low",
        "diff_ci_high",
    }
    assert (summary.n_seeds == 2).all() and (summary[summary.arm == "baseline"].diff_mean == 0).all()
    # Each seed's pool was sampled from that seed's baseline run, and the rlep arm replayed it.
    assert sorted(set(half_right_collection)) == sorted(
        str(tmp_path / "study" / "runs" / "baseline" / f"seed-{s}" / "checkpoints" / "step-2") for s in (0, 1)
    )
    metrics = pd.read_parquet(tmp_path / "study" / "runs" / "rlep" / "seed-1" / "metrics.parquet")
    assert (metrics.replay_share > 0).all()
    text = paths["report"].read_text()
    assert "| rlep-ahead-at-end | rlep vs baseline | accuracy at step 2 | 2 |" in text and "| pass@2 |" in text
    assert "Plan fixed at " in text and "before any run (claims.json" in text  # recorded as the study started
    assert pd.read_parquet(paths["claims"]).claim.tolist() == ["rlep-ahead-at-end"]
    # Each run's stability: its best and last evaluation, and its entropy per step read from its metrics.
    stable = pd.read_parquet(paths["stability"]).set_index(["arm", "seed"])
    assert stable.loc[("rlep", 1), "entropy_last"] == metrics.sort_values("step").entropy.iloc[-1]
    assert "## Did each run keep improving?" in text and paths["entropy_plot"].is_file()
    # The reward-hack check read every run's answers: each collection's pool, each arm run's rollouts and final answers.
    checks = pd.read_parquet(paths["answer_check"])
    assert sorted(set(zip(checks.run, checks.answers))) == sorted(
        [(f"collect/seed-{s}", "pool") for s in (0, 1)]
        + [
            (f"{arm}/seed-{s}", what)
            for arm in ARMS
            for s in (0, 1)
            for what in ("trained rollouts", "final evaluation")
        ]
    )
    assert "## Reward-hack check: accepted answers that are not the gold's number" in text
    for name in (
        "accuracy_vs_step.png",
        "accuracy_vs_tokens.png",
        "accuracy_vs_charged_tokens.png",
        "accuracy_vs_wall.png",
    ):
        assert paths[name].stat().st_size > 5_000

    import rlep.tasks.training.trainer as trainer_module

    def no_training(*args, **kwargs):
        raise AssertionError("a finished run was run again")

    monkeypatch.setattr(trainer_module, "train", no_training)
    again = run_study(config, progress=False)
    assert pd.read_parquet(again["study"]).equals(study)
    # A record whose digest is of an earlier layout of the same settings (the dump changed, not the run): the
    # training is kept, only its final evaluation is done again, and the record gets today's digest.
    done = tmp_path / "study" / "runs" / "rlep" / "seed-1" / "run_record.json"
    record = json.loads(done.read_text())
    done.write_text(json.dumps({**record, "settings": "an-earlier-dump"}))
    assert pd.read_parquet(run_study(config, progress=False)["study"]).equals(study)
    assert json.loads(done.read_text())["settings"] == record["settings"]
    # The command resumes the same way, and keeps library output in the study's rlep.log, not the terminal.
    path = tmp_path / "study.yaml"
    path.write_text(json.dumps(config.model_dump(mode="json")))
    assert main(["study", "--config", str(path), "--no-prefect"]) == 0
    assert pd.read_parquet(paths["study"]).equals(study) and (tmp_path / "study" / "rlep.log").is_file()
    # --report-only runs nothing: with every run finished it is the study's report; with one unfinished (its
    # record gone) it describes the others and tests no claim.
    assert main(["study", "--config", str(path), "--report-only"]) == 0
    assert pd.read_parquet(paths["claims"]).claim.tolist() == ["rlep-ahead-at-end"]
    done.unlink()
    assert main(["study", "--config", str(path), "--report-only"]) == 0
    text = paths["report"].read_text()
    assert text.startswith("# rlep study (interim: 3 of 4 training runs finished)")
    assert "Finished: baseline/seed-0, rlep/seed-0, baseline/seed-1." in text and "Not tested yet" in text
    assert (
        not paths["claims"].exists()
        and not (tmp_path / "study" / "runs" / "rlep" / "seed-1" / "run_record.json").exists()
    )
    interim = pd.read_parquet(paths["study"])
    assert interim.equals(study[(study.arm != "rlep") | (study.seed != 1)].reset_index(drop=True))


@pytest.mark.slow
def test_a_tiny_study_on_a_local_ray_through_prefect(prefect_runs, fixture_model, tmp_path):
    """Also what a user watching from the Prefect UI sees of a study on Ray: each run's step lines in its train
    flow's Logs tab (a subflow of the study's run, called in the run's task on its worker, flows/subflows.py), the
    run's start and end in that task's own Logs tab, and the tracker's event files beside the run's metrics."""
    from prefect.client.orchestration import get_client

    from rlep.data.run_layout import TrainRunLayout
    from rlep.flows.study import study_flow

    settings = tiny_study_settings(
        fixture_model,
        tmp_path / "ray",
        {"baseline": {"replay": {"kind": "none"}}, "fifo": {"replay": {"kind": "fifo"}}},
        runner={"kind": "ray", "max_parallel": 2},
    )
    settings["train"]["tracker"] = "tensorboard"
    report = study_flow(StudyConfig.model_validate(settings))
    with get_client(sync_client=True) as client:
        runs, artifacts = prefect_runs(client)
        keys = {a.key for a in artifacts}
        subflows = _subflows_by_run(client, runs, artifacts)
    assert keys >= {"study-claims", "study-summary", "study-report"}
    # Each run's train and evaluate flows are subflows of the study's run, called in the run's task on its worker,
    # with their artifacts and (train) step lines.
    assert sorted(subflows) == [f"{arm}/seed-{s}" for arm in ("baseline", "fifo") for s in (0, 1)]
    for key, flows in subflows.items():
        assert sorted(flows) == ["evaluate", "train"]
        assert flows["train"]["artifacts"] >= {"train-summary", "train-metrics"}
        assert "eval-summary" in flows["evaluate"]["artifacts"]
        assert [line.split("  ")[0] for line in flows["train"]["steps"]] == ["step 1/2", "step 2/2"]
        run_out = tmp_path / "ray" / "runs" / key
        assert f"train run {key}: {run_out}" in flows["train"]["task"] and f"{key} done" in flows["train"]["task"]
        assert TrainRunLayout(run_out).tensorboard.is_dir()
    study = pd.read_parquet(tmp_path / "ray" / "study.parquet")
    assert report.endswith("report.md") and len(study) == 2 * 2 * 3  # arms x seeds x evaluation steps
    records = [
        json.loads((tmp_path / "ray" / "runs" / arm / f"seed-{s}" / "run_record.json").read_text())
        for arm in ("baseline", "fifo")
        for s in (0, 1)
    ]
    assert len({r["process"] for r in records}) == 4  # each run in a worker process of its own


def _subflows_by_run(client, runs, artifacts) -> dict[str, dict[str, dict]]:
    """Study run key -> flow name -> its artifact keys, step lines and the log lines of the task it was called in,
    for every flow run under the study's run: each must be a child of the study's flow run through a task run whose
    parent is the run's `study-run` task."""
    from prefect.client.schemas.filters import LogFilter, LogFilterTaskRunId

    names = {r.id: client.read_flow(r.flow_id).name for r in runs}
    (study,) = [r for r in runs if names[r.id] == "study"]
    found: dict[str, dict[str, dict]] = {}
    for run in runs:
        if run.id == study.id:
            continue
        assert run.parent_task_run_id is not None and run.state.is_completed(), names[run.id]
        tracking = client.read_task_run(run.parent_task_run_id)
        assert tracking.flow_run_id == study.id, names[run.id]
        parents = tracking.task_inputs.get("__parents__", [])  # the task run the flow was called in
        key = client.read_task_run(parents[0].id).name if parents else f"no task: {names[run.id]}"
        logs = flow_run_logs(run.id) if names[run.id] == "train" else []  # once its last step line has arrived
        ids = [p.id for p in parents]
        task_logs = client.read_logs(LogFilter(task_run_id=LogFilterTaskRunId(any_=ids))) if ids else []
        found.setdefault(key, {})[names[run.id]] = {
            "artifacts": {a.key for a in artifacts if a.flow_run_id == run.id},
            "steps": [log.message for log in logs if log.message.startswith("step ")],
            "task": [log.message for log in task_logs],  # the Logs tab of the task the flow was called in
        }
    return found


LIVING = {"replay": {"kind": "rlep", "follow": True, "refresh_every": 2}}


def test_a_living_arm_plans_its_own_store_and_refuses_a_refresh_it_never_reaches(tmp_path):
    settings = tiny_study_settings("tiny", tmp_path, {**ARMS, "living": LIVING})
    settings["train"]["steps"] = 7
    runs = {r.key: r for r in plan(StudyConfig.model_validate(settings))}
    living = runs["living/seed-1"]
    assert living.needs == ["collect/seed-1"] and runs["rlep/seed-1"].living is None
    assert living.config.replay.pool == living.living.store == tmp_path / "pools" / "living" / "seed-1"
    assert living.living.first_pool == tmp_path / "collect" / "seed-1" / "pool.parquet"
    assert living.living.refresh_steps(7) == [2, 4, 6] and living.living.collect.seed == 1
    settings["train"]["steps"] = 2
    with pytest.raises(StudyError, match=r"arms.living: replay.refresh_every \(2\) must be below steps \(2\)"):
        plan(StudyConfig.model_validate(settings))


@pytest.mark.slow
def test_a_living_arm_recollects_from_its_own_checkpoints_and_is_charged(
    fixture_model, tmp_path, half_right_collection
):
    settings = tiny_study_settings(
        fixture_model, tmp_path / "study", {**ARMS, "living": LIVING}, seeds=[0], runner={"isolate": False}
    )
    settings["train"]["steps"] = 5
    paths = run_study(StudyConfig.model_validate(settings), progress=False)
    runs = tmp_path / "study" / "runs"
    # Re-collected after steps 2 and 4 from the arm's own checkpoints (the first pool from the baseline's).
    assert sorted(set(half_right_collection)) == sorted(
        [str(runs / "baseline" / "seed-0" / "checkpoints" / "step-5")]
        + [str(runs / "living" / "seed-0" / "checkpoints" / f"step-{s}") for s in (2, 4)]
    )
    from rlep.data.pool import PoolStore

    store = PoolStore(tmp_path / "study" / "pools" / "living" / "seed-0")
    assert store.versions() == [1, 2, 3]
    assert [c["after_step"] for c in store.lineage(3)["contributions"]] == [0, 2, 4]
    metrics = pd.read_parquet(runs / "living" / "seed-0" / "metrics.parquet")
    assert metrics.step.tolist() == [1, 2, 3, 4, 5]  # one run, resumed at each re-collection
    assert metrics.replay_pool_version.tolist() == [1, 1, 2, 2, 3]  # each version from the step after it
    # Charged: the same collection as rlep (its dependency) plus each re-collection from the step after it.
    study = pd.read_parquet(paths["study"]).set_index(["arm", "step"])
    extra = study.tokens_charged - study.tokens_generated
    from rlep.tasks.living_pool import refresh_costs

    (_, first), (_, second) = refresh_costs(store.root)
    assert first["tokens_generated"] > 0 and second["tokens_generated"] > 0
    for step, refreshes in (
        (1, 0),
        (2, 0),
        (3, first["tokens_generated"]),
        (5, first["tokens_generated"] + second["tokens_generated"]),
    ):
        assert extra["living", step] == pytest.approx(extra["rlep", step] + refreshes)
    assert set(pd.read_parquet(paths["final"]).arm) == {"baseline", "rlep", "living"}
    # Each finished run kept its final checkpoint only (the living arm's at its parts' ends 2 and 4 were removed).
    for arm in ("baseline", "rlep", "living"):
        assert [p.name for p in sorted((runs / arm / "seed-0" / "checkpoints").iterdir())] == ["step-5"], arm
    # The same study with the pool refreshed every 3 steps: the living arm starts over, store included (its
    # old versions would otherwise pass for re-collections already done); the other runs are kept.
    settings["arms"]["living"] = {"replay": {**LIVING["replay"], "refresh_every": 3}}
    from rlep.tasks.study.claims import StudyRecord

    recorded = StudyRecord.read(tmp_path / "study").digest  # a changed plan once runs exist is made on purpose
    settings["amendments"] = [{"of": recorded[:12], "reason": "the living pool refreshed every 3 steps"}]
    settings["finished_runs_keep"] = "all"  # not part of the plan (test_the_record_covers_the_whole_plan_...)
    run_study(StudyConfig.model_validate(settings), progress=False)
    living_checkpoints = sorted((runs / "living" / "seed-0" / "checkpoints").iterdir())
    assert [p.name for p in living_checkpoints] == ["step-3", "step-5"]  # keep_checkpoints 2, all kept
    assert [c["after_step"] for c in PoolStore(store.root).lineage(2)["contributions"]] == [0, 3]
    assert PoolStore(store.root).versions() == [1, 2]
    metrics = pd.read_parquet(runs / "living" / "seed-0" / "metrics.parquet")
    assert metrics.replay_pool_version.tolist() == [1, 1, 1, 2, 2]


@pytest.mark.slow
def test_a_local_study_runs_each_run_in_a_fresh_process_and_keeps_its_log_lines(fixture_model, tmp_path, caplog):
    import logging
    import os

    arms = {"baseline": {"replay": {"kind": "none"}}, "fifo": {"replay": {"kind": "fifo"}}}
    config = StudyConfig.model_validate(tiny_study_settings(fixture_model, tmp_path / "study", arms, seeds=[0]))
    assert config.runner.isolate  # the default
    with caplog.at_level(logging.INFO, logger="rlep"):
        run_study(config, progress=False)
    records = [json.loads((tmp_path / "study" / "runs" / a / "seed-0" / "run_record.json").read_text()) for a in arms]
    assert len({r["process"] for r in records} | {os.getpid()}) == 3  # two fresh processes, neither this one
    # The runs' step lines were logged in their processes and handled here (so a Prefect task would send them).
    steps = [r.getMessage() for r in caplog.records if r.name.startswith("rlep") and r.getMessage().startswith("step")]
    assert len(steps) == 2 * 2 and all(line.startswith(("step 1/2", "step 2/2")) for line in steps)
