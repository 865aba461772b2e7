"""Settings of an earlier layout read as today's, by the one migration step (tasks/settings/migrate.py), wherever
they come from: a saved run's train_config.json, a collection's manifest, a YAML, a study's arm, a pickle; and
the one sampling section each config holds, with its own defaults and bounds."""

import json
import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from rlep.data.run_layout import CollectRunLayout
from rlep.flows.options import ConfigError, build_config
from rlep.tasks.reuse import collected_alike as _collected_alike
from rlep.tasks.reuse import trained_alike as _trained_alike
from rlep.tasks.settings.collect import CollectConfig
from rlep.tasks.settings.engine import EvalSampling, RolloutSampling
from rlep.tasks.settings.evaluate import EvalConfig
from rlep.tasks.settings.layering import merge_settings
from rlep.tasks.settings.study import StudyConfig, StudyEvalConfig, StudyEvalSampling
from rlep.tasks.settings.train import AsymREObjective, PPOClipObjective, TrainConfig
from rlep.tasks.study.plan import plan

ROOT = Path(__file__).resolve().parents[2]
SAVED = Path(__file__).parent / "saved"
# Written by the release before the sampling section, as they are: the real-model study's first run (2026-11-26,
# flows/configs/real-room.yaml) and a collection of the self-replay study (problem sources then had no `kind`).
SAVED_TRAINING = SAVED / "real-room-baseline-seed-0.train_config.json"
SAVED_COLLECTION = SAVED / "study-self-replay-quick-seed-0.manifest.json"


def _planned(config: str, key: str):
    return {run.key: run for run in plan(build_config(StudyConfig, ROOT / "flows/configs" / config))}[key]


def test_a_saved_training_run_is_the_run_its_study_plans_today(tmp_path, monkeypatch):
    saved = json.loads(SAVED_TRAINING.read_text())
    assert {"temperature", "top_p", "max_tokens"} <= set(saved)  # the flat layout
    run = _planned("real-room.yaml", "baseline/seed-0")
    # The study started from its model resolved to a path (`with_models_resolved`), which the run saved.
    run.config = run.config.model_copy(update={"model": saved["model"]})
    assert run.config.sampling == RolloutSampling(temperature=0.7, top_p=1.0, max_tokens=48)
    assert TrainConfig.model_validate(saved) == run.config
    # So a resumed study keeps the run (`execute_run` trains or evaluates again only runs this is false for).
    monkeypatch.chdir(tmp_path)
    out = Path(run.config.out)
    out.mkdir(parents=True)
    shutil.copy(SAVED_TRAINING, out / "train_config.json")
    assert _trained_alike(run)


def test_a_saved_collection_is_the_collection_its_study_plans_today(tmp_path):
    saved = json.loads(SAVED_COLLECTION.read_text())["parameters"]
    assert {"temperature", "top_p", "max_tokens"} <= set(saved)
    run = _planned("study-self-replay-quick.yaml", "collect/seed-0")
    config = run.config.model_copy(update={"model": saved["model"]})  # the exploration's checkpoint, set at run time
    assert config.sampling == RolloutSampling(temperature=0.7, top_p=0.95, max_tokens=24)
    layout = CollectRunLayout(tmp_path)
    shutil.copy(SAVED_COLLECTION, layout.manifest)
    assert _collected_alike(layout, config)
    assert not _collected_alike(layout, config.model_copy(update={"sampling": RolloutSampling(temperature=0.5)}))


def test_a_yaml_of_the_earlier_layout_loads_and_takes_flags(tmp_path):
    earlier = tmp_path / "earlier.yaml"
    earlier.write_text("temperature: 0.5\nmax_tokens: 12\nloss: {objective: asymre, asymre_delta_v: -0.2}\n")
    today = tmp_path / "today.yaml"
    today.write_text("sampling: {temperature: 0.5, max_tokens: 12}\nloss: {objective: {kind: asymre, delta_v: -0.2}}\n")
    config = build_config(TrainConfig, earlier)
    assert config == build_config(TrainConfig, today)
    assert config.sampling == RolloutSampling(temperature=0.5, top_p=1.0, max_tokens=12)
    assert config.loss.objective == AsymREObjective(delta_v=-0.2)
    # A flag is the same setting as the YAML's flat key: it overrides it, and the file's others stay.
    flagged = build_config(TrainConfig, earlier, {"sampling.temperature": 0.6, "sampling.top_p": 0.9})
    assert flagged.sampling == RolloutSampling(temperature=0.6, top_p=0.9, max_tokens=12)
    # The frozen real-model study keeps its flat keys and loads through the migration.
    study = build_config(StudyConfig, ROOT / "flows/configs/real-room.yaml")
    assert "\n  temperature: 0.7\n" in (ROOT / "flows/configs/real-room.yaml").read_text()
    assert study.collect.sampling == RolloutSampling(temperature=0.7, top_p=0.95, max_tokens=48)
    assert study.train.sampling == RolloutSampling(temperature=0.7, top_p=1.0, max_tokens=48)
    assert study.evaluate.sampling == StudyEvalSampling(max_tokens=48)


def test_an_arm_of_the_earlier_layout_merges_into_todays_base():
    base = TrainConfig().model_dump(mode="json")
    merged = merge_settings(base, {"max_tokens": 8, "loss": {"clip_high": 0.3}}, TrainConfig)
    config = TrainConfig.model_validate(merged)
    assert config.sampling == RolloutSampling(max_tokens=8, temperature=1.0, top_p=1.0)
    assert config.loss.objective == PPOClipObjective(clip_high=0.3)
    # A flow's parameters (Prefect validates them with the model) and Python read it too.
    assert CollectConfig.model_validate({"max_tokens": 12}).sampling == RolloutSampling(
        temperature=0.7, top_p=0.95, max_tokens=12
    )
    assert StudyEvalConfig(max_tokens=48).sampling == StudyEvalSampling(max_tokens=48)


@pytest.mark.parametrize(
    "settings, named",
    [
        ("max_tokens: 8\nsampling: {max_tokens: 9}\n", r"max_tokens and sampling\.max_tokens both given"),
        (
            "loss: {clip_low: 0.1, objective: {kind: ppo-clip, clip_low: 0.2}}\n",
            r"loss\.clip_low and loss\.objective\.clip_low both given",
        ),
    ],
)
def test_a_setting_given_in_both_layouts_is_refused_naming_both(tmp_path, settings, named):
    path = tmp_path / "both.yaml"
    path.write_text(settings)
    with pytest.raises(ConfigError, match=rf"both\.yaml: invalid configuration: .*{named}"):
        build_config(TrainConfig, path)
    study = tmp_path / "study.yaml"
    study.write_text("train:\n" + "".join(f"  {line}\n" for line in settings.splitlines()))
    with pytest.raises(ConfigError, match=rf"train: .*{named}"):
        build_config(StudyConfig, study)


def test_a_run_pickled_in_the_earlier_layout_unpickles_in_todays():
    """What a process started before the change hands to one spawned after it (a study's isolated runs)."""
    state = CollectConfig().__getstate__()
    fields = dict(state["__dict__"])
    fields.update(fields.pop("sampling").model_dump())
    earlier = {**state, "__dict__": fields}
    config = CollectConfig.__new__(CollectConfig)
    config.__setstate__(earlier)
    assert config == CollectConfig()


def test_each_config_keeps_its_sampling_defaults_and_bounds():
    assert CollectConfig().sampling == RolloutSampling(temperature=0.7, top_p=0.95, max_tokens=24)
    assert TrainConfig().sampling == RolloutSampling(temperature=1.0, top_p=1.0, max_tokens=24)
    assert EvalConfig().sampling == EvalSampling(temperature=None, top_p=1.0, max_tokens=32)
    assert (StudyEvalConfig().samples, StudyEvalConfig().sampling) == (4, StudyEvalSampling(max_tokens=None))
    # A section given in part keeps its config's defaults, not its class's, as a dict or as an instance.
    assert CollectConfig(sampling={"top_p": 0.9}).sampling == RolloutSampling(temperature=0.7, top_p=0.9, max_tokens=24)
    assert TrainConfig(sampling=RolloutSampling(temperature=0.5)).sampling.max_tokens == 24
    # Requests: evaluation greedy for K=1 and at 1.0 for K>1 unless set; collection's seed per shard.
    assert EvalConfig().request().temperature == 0.0 and EvalConfig(samples=4).request().temperature == 1.0
    assert CollectConfig().request(3).model_dump(exclude={"stop"}) == {
        "temperature": 0.7,
        "top_p": 0.95,
        "max_tokens": 24,
        "n": 8,
        "seed": 3,
    }
    # Rollouts are compared with one another, so never greedy; an evaluation may be, with one answer.
    for config in (CollectConfig, TrainConfig):
        with pytest.raises(ValidationError, match=r"sampling\.temperature\n  Input should be greater than 0"):
            config(sampling={"temperature": 0})
    assert EvalConfig(sampling={"temperature": 0}).request().temperature == 0
    for config in (EvalConfig, StudyEvalConfig):
        with pytest.raises(ValidationError, match="samples > 1 with temperature 0"):
            config(samples=2, sampling={"temperature": 0})
