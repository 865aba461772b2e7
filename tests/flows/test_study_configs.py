"""Every shipped study configuration is a valid study: its arms' settings validate and it plans (before any
run), with its seeds, and RLEP arms get their exploration and collection."""

from pathlib import Path

import pytest
import yaml

from rlep.tasks.study import StudyConfig, plan

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "flows" / "configs").glob("study-*.yaml"))


def test_the_study_configurations_are_shipped():
    assert {p.stem for p in CONFIGS} >= {
        "study-designs",
        "study-designs-quick",
        "study-hard",
        "study-hard-quick",
        "study-reasoning",
        "study-reasoning-quick",
        "study-living-quick",
    }


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_a_shipped_study_configuration_plans(path):
    config = StudyConfig.model_validate(yaml.safe_load(path.read_text()))
    runs = plan(config)
    trained = [r for r in runs if r.kind == "train" and r.arm is not None]
    assert sorted({(r.arm, r.seed) for r in trained}) == sorted((a, s) for a in config.arms for s in config.seeds)
    assert len(config.seeds) >= 3
    if any(arm.get("replay", {}).get("kind") == "rlep" for arm in config.arms.values()):
        assert sum(r.kind == "collect" for r in runs) == len(config.seeds)  # one pool per seed, shared
    updates = {r.arm: r.config.updates_per_epoch() * r.config.ppo_epochs for r in trained}
    assert len(set(updates.values())) == 1, updates  # every arm makes the same number of optimizer updates


def test_every_shipped_configuration_loads():
    # The pipeline's demo as well as every study: a setting the checks refuse (a FIFO batch the mini-batches
    # do not divide) fails here, not when someone runs it.
    from rlep.tasks.settings.pipeline import PipelineConfig

    paths = sorted(CONFIGS[0].parent.glob("*.yaml"))
    assert len(paths) > len(CONFIGS)
    for path in paths:
        settings = yaml.safe_load(path.read_text())
        if "arms" in settings:
            plan(StudyConfig.model_validate(settings))
        else:
            PipelineConfig.model_validate(settings)


QUICK = [p for p in CONFIGS if p.stem.endswith("-quick") and p.stem != "study-async"]


@pytest.mark.parametrize("path", QUICK, ids=[p.stem for p in QUICK])
def test_a_quick_study_fixes_its_claims_and_evaluates_often(path):
    # The claims a study's report tests are written in its configuration before it runs, each at a step that is
    # evaluated; 5 seeds or more for a claim; held-out evaluation at least every 5 steps.
    config = StudyConfig.model_validate(yaml.safe_load(path.read_text()))
    assert config.claims and len(config.seeds) >= 5
    runs = [r for r in plan(config) if r.kind == "train" and r.arm is not None]
    for run in runs:
        assert 0 < run.config.eval_every <= 5
    for claim in config.claims:
        if claim.step is not None:
            arm = next(r for r in runs if r.arm == claim.arm)
            assert claim.step % arm.config.eval_every == 0 or claim.step == arm.config.steps, claim.name


def test_the_real_model_learning_check_plans_fairly():
    path = CONFIGS[0].parent / "real-quick.yaml"
    config = StudyConfig.model_validate(yaml.safe_load(path.read_text()))
    runs = plan(config)
    trained = [r for r in runs if r.kind == "train" and r.arm is not None]
    assert {r.config.model for r in trained} == {"smollm2"} and len(config.seeds) >= 3 and config.claims
    assert {r.config.updates_per_epoch() for r in trained} == {2} and all(r.config.eval_every == 5 for r in trained)
    assert sum(r.kind == "collect" for r in runs) == len(config.seeds)  # RLEP's pool from each seed's exploration
