"""The versioned digest of resolved settings (rlep.tasks.settings.digest): settings read through the migration,
dumped canonically, hashed with the digest's version; a run saved before `precision: auto` compared by the one
question that needs the device, asked of it alone."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlep.tasks.settings import digest
from rlep.tasks.settings.collect import CollectConfig
from rlep.tasks.settings.digest import (
    DIGEST_VERSION,
    digest_record,
    resolved,
    same_digest,
    same_settings,
    settings_digest,
)
from rlep.tasks.settings.engine import RolloutSampling
from rlep.tasks.settings.evaluate import EvalConfig
from rlep.tasks.settings.train import TrainConfig

SAVED = Path(__file__).resolve().parents[1] / "saved"
SAVED_TRAINING = SAVED / "real-room-baseline-seed-0.train_config.json"
SAVED_COLLECTION = SAVED / "study-self-replay-quick-seed-0.manifest.json"


def test_settings_of_an_earlier_layout_have_the_digest_of_todays():
    saved = SAVED_TRAINING.read_text()
    assert {"temperature", "top_p", "max_tokens"} <= set(json.loads(saved))  # the flat layout
    today = TrainConfig.model_validate(json.loads(saved)).model_dump(mode="json")
    assert "temperature" not in today and today["sampling"]["temperature"] == 0.7
    assert settings_digest(resolved(TrainConfig, saved)) == settings_digest(resolved(TrainConfig, today))
    assert same_settings(TrainConfig, saved, TrainConfig.model_validate(today))


def test_the_digest_is_canonical_and_covers_every_part():
    config = TrainConfig(out="runs/x")
    again = TrainConfig.model_validate(dict(reversed(list(config.model_dump(mode="json").items()))))
    assert settings_digest(config) == settings_digest(again)
    assert settings_digest(config) == settings_digest(TrainConfig(out=Path("runs/x")))
    assert len(settings_digest(config)) == 16
    evaluation = EvalConfig(samples=4)
    assert settings_digest(config, evaluation) != settings_digest(config, None)
    assert settings_digest(config, evaluation) != settings_digest(evaluation, config)
    assert settings_digest(config, None, [5, "c"]) != settings_digest(config, None, [6, "c"])
    assert settings_digest(config) != settings_digest(config.model_copy(update={"steps": 41}))
    assert settings_digest(config, exclude={"steps": True}) == settings_digest(
        config.model_copy(update={"steps": 41}), exclude={"steps": True}
    )


def test_the_version_is_hashed_and_recorded_beside_the_digest(monkeypatch):
    config = CollectConfig()
    record = digest_record(config)
    assert record == {"settings": settings_digest(config), "settings_digest_version": DIGEST_VERSION}
    assert same_digest(record, config) is True
    assert same_digest(record, config.model_copy(update={"seed": 1})) is False
    # A record of another version, or of none (written before), cannot tell: the saved settings are compared.
    assert same_digest({**record, "settings_digest_version": DIGEST_VERSION + 1}, config) is None
    assert same_digest({"settings": record["settings"]}, config) is None
    monkeypatch.setattr(digest, "DIGEST_VERSION", DIGEST_VERSION + 1)
    assert settings_digest(config) != record["settings"]
    assert same_digest(record, config) is None


def test_a_saved_collection_compares_by_its_settings_read_today():
    saved = json.loads(SAVED_COLLECTION.read_text())["parameters"]
    assert "kind" not in saved["problems"] and "temperature" in saved  # sources without kinds, flat sampling
    config = CollectConfig.model_validate(saved)
    assert same_settings(CollectConfig, saved, config)
    other = config.model_copy(update={"sampling": RolloutSampling(temperature=0.5)})
    assert not same_settings(CollectConfig, saved, other)
    assert not same_settings(CollectConfig, {**saved, "samples_per_prompt": 0}, config)  # not valid today


def test_a_run_saved_before_auto_is_the_same_training_where_auto_picks_its_precision():
    old = TrainConfig(backend={"precision": "fp32"}).model_dump_json()
    today = TrainConfig()
    assert not same_settings(TrainConfig, old, today)  # no way to ask: another training
    assert same_settings(TrainConfig, old, today, auto_precision=lambda: "fp32")
    assert not same_settings(TrainConfig, old, today, auto_precision=lambda: "bf16")
    ignore = {"steps": True, "replay": {"pool"}}
    longer = today.model_copy(update={"steps": today.steps + 10})
    assert same_settings(TrainConfig, old, longer, exclude=ignore, auto_precision=lambda: "fp32")
    # Asked of such a run only: settings saved with `auto`, or a request of a concrete precision, need no device.
    never = lambda: pytest.fail("the device was asked")  # noqa: E731
    assert same_settings(TrainConfig, today.model_dump_json(), today, auto_precision=never)
    fp32 = TrainConfig(backend={"precision": "fp32"})
    assert same_settings(TrainConfig, old, fp32, auto_precision=never)
    assert not same_settings(TrainConfig, today.model_dump_json(), fp32, auto_precision=never)


def test_a_saved_run_is_read_and_digested_without_torch_numpy_or_pyarrow():
    """What decides whether a finished run can be reused, in a fresh interpreter: the settings a run saved read
    through the migration, compared with today's, digested with an evaluation's and a collection's."""
    code = (
        "import json, sys\n"
        "from rlep.tasks.settings.collect import CollectConfig\n"
        "from rlep.tasks.settings.digest import same_settings, settings_digest\n"
        "from rlep.tasks.settings.evaluate import EvalConfig\n"
        "from rlep.tasks.settings.train import TrainConfig\n"
        f"saved = open({str(SAVED_TRAINING)!r}).read()\n"
        "config = TrainConfig.model_validate_json(saved)\n"
        "assert same_settings(TrainConfig, saved, config)\n"
        "settings_digest(config, EvalConfig(), CollectConfig())\n"
        "print(json.dumps([m for m in ('torch', 'numpy', 'pyarrow', 'vllm', 'transformers') if m in sys.modules]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []
