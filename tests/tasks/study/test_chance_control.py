"""A study's chance control: an arm that is the baseline re-seeded from a step (`perturb: {reseed_at: R}`), planned
as an ordinary run of every seed, and named by claims as `against`."""

import pytest
import yaml
from conftest import tiny_study_settings

from rlep.flows.options import build_config
from rlep.tasks.study import StudyConfig, StudyError, plan

ARMS = {
    "grpo": {"replay": {"kind": "none"}},
    "grpo-reseeded": {"perturb": {"reseed_at": 2}},
    "rlep": {"replay": {"kind": "rlep"}},
}
CLAIM = {"name": "rlep-beats-chance", "arm": "rlep", "against": "grpo-reseeded", "kind": "accuracy_diff", "step": 2}


def _study(tmp_path, arms=ARMS, **extra):
    path = tmp_path / "study.yaml"
    settings = tiny_study_settings("tiny", tmp_path / "out", arms, baseline_arm="grpo", **extra)
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
    with pytest.raises(StudyError, match=r"arms\.grpo-reseeded\.perturb\.reseed: Extra inputs"):
        plan(_study(tmp_path, {**ARMS, "grpo-reseeded": {"perturb": {"reseed": 2}}}))
