"""Backend settings are one model per kind (`one-process`, `ddp`, `fsdp2`): each kind holds only its own settings,
`--nproc`/`--strategy` and every earlier layout still name the same training (change 4 of tasks/settings/migrate.py).
"""

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from rlep.flows.options import ConfigError, build_config
from rlep.tasks.settings.backend import DdpBackend, Fsdp2Backend, OneProcessBackend, backend_config
from rlep.tasks.settings.digest import settings_digest
from rlep.tasks.settings.layering import merge_settings
from rlep.tasks.settings.study import StudyConfig
from rlep.tasks.settings.train import TrainConfig

SAVED_TRAINING = Path(__file__).resolve().parents[1] / "saved" / "real-room-baseline-seed-0.train_config.json"

# The one backend model before kinds, as a run's train_config.json dumped it (every setting, defaults included).
DUMP_BEFORE_KINDS = {
    "nproc": 1,
    "strategy": "fsdp2",
    "precision": "auto",
    "fsdp_param_dtype": "float32",
    "activation_checkpointing": False,
    "launcher": "torchrun",
    "ray_address": None,
    "cpus_per_rank": 1.0,
    "gpus_per_rank": "auto",
    "ray_placement_timeout": 120.0,
    "collective_timeout": 300.0,
    "command_timeout": 7200.0,
}


def test_each_kind_holds_its_own_settings_only():
    assert TrainConfig().backend == OneProcessBackend()
    assert set(OneProcessBackend.model_fields) == {"kind", "precision", "activation_checkpointing"}
    assert "fsdp_param_dtype" in Fsdp2Backend.model_fields and "fsdp_param_dtype" not in DdpBackend.model_fields
    assert OneProcessBackend().nproc == 1  # what the loop asks of any backend
    for settings, named in [
        ({"kind": "one-process", "launcher": "ray"}, "one-process.launcher"),
        ({"kind": "ddp", "nproc": 2, "fsdp_param_dtype": "bfloat16"}, "ddp.fsdp_param_dtype"),
        ({"kind": "fsdp2", "nproc": 0}, "fsdp2.nproc"),
        ({"kind": "zero3", "nproc": 2}, "zero3"),
    ]:
        with pytest.raises(ValidationError, match=named):
            backend_config(**settings)


def test_settings_without_a_kind_are_read_as_the_kind_nproc_and_strategy_named():
    assert backend_config(**DUMP_BEFORE_KINDS) == OneProcessBackend()  # the saved one-process run: its kind's only
    ddp = backend_config(**{**DUMP_BEFORE_KINDS, "nproc": 3, "strategy": "ddp", "launcher": "ray"})
    assert ddp == DdpBackend(nproc=3, launcher="ray")
    fsdp2 = backend_config(**{**DUMP_BEFORE_KINDS, "nproc": 2, "fsdp_param_dtype": "bfloat16"})
    assert fsdp2 == Fsdp2Backend(nproc=2, fsdp_param_dtype="bfloat16")
    assert backend_config(nproc=2) == Fsdp2Backend(nproc=2)  # `--nproc 2` alone: fsdp2, as before kinds
    assert (
        backend_config(nproc=1, strategy="ddp") == OneProcessBackend()
    )  # nproc 1 was one process whatever the strategy
    # a setting of another kind that was changed, not left at its default, is refused, not dropped
    with pytest.raises(ValidationError, match="one-process.launcher"):
        backend_config(launcher="ray")
    with pytest.raises(ValidationError, match="one-process.fsdp_param_dtype"):
        backend_config(**{**DUMP_BEFORE_KINDS, "fsdp_param_dtype": "bfloat16"})
    saved = TrainConfig.model_validate_json(SAVED_TRAINING.read_text())
    assert (
        json.loads(SAVED_TRAINING.read_text())["backend"]["strategy"] == "fsdp2" and saved.backend.kind == "one-process"
    )
    # the same training in both layouts digests alike
    before = TrainConfig(backend={**DUMP_BEFORE_KINDS, "nproc": 4, "strategy": "ddp"})
    assert settings_digest(before) == settings_digest(TrainConfig(backend={"kind": "ddp", "nproc": 4}))


def _yaml(tmp_path, backend: dict) -> Path:
    path = tmp_path / "train.yaml"
    path.write_text(json.dumps({"backend": backend}))  # JSON is YAML
    return path


def test_the_flags_name_the_kind_as_before_over_a_file_of_either_layout(tmp_path):
    def built(overrides, backend=None):
        config_file = _yaml(tmp_path, backend) if backend is not None else None
        return build_config(TrainConfig, config_file, overrides).backend

    assert built({"backend.nproc": 2}) == Fsdp2Backend(nproc=2)
    assert built({"backend.nproc": 2, "backend.kind": "ddp"}) == DdpBackend(nproc=2)
    assert built({"backend.nproc": 1}) == OneProcessBackend()
    with pytest.raises(ConfigError, match="nproc"):
        built({"backend.kind": "ddp"})  # `--strategy ddp` alone was one process, silently: now the ranks are asked
    # a file's kind holds under flags for its other settings
    assert built({"backend.nproc": 4}, {"kind": "ddp", "nproc": 2}) == DdpBackend(nproc=4)
    assert built({"backend.precision": "bf16"}, {"kind": "ddp", "nproc": 2}) == DdpBackend(nproc=2, precision="bf16")
    assert built({"backend.nproc": 4}, {"nproc": 2, "strategy": "ddp"}) == DdpBackend(nproc=4)  # a file from before
    assert built({"backend.nproc": 2}, {"kind": "one-process", "precision": "fp32"}) == Fsdp2Backend(
        nproc=2, precision="fp32"
    )
    assert built({"backend.kind": "one-process"}, {"kind": "fsdp2", "nproc": 4}) == OneProcessBackend()
    # `--nproc 1` is one process whatever the kind, as it always was: a run of ranks resumed in one process
    ranks = {"kind": "fsdp2", "nproc": 2, "launcher": "ray", "fsdp_param_dtype": "bfloat16", "precision": "fp32"}
    assert built({"backend.nproc": 1}, ranks) == OneProcessBackend(precision="fp32")
    assert built({"backend.nproc": 1, "backend.kind": "ddp"}) == OneProcessBackend()
    with pytest.raises(ConfigError, match="launcher"):
        built({"backend.launcher": "ray"})  # ranks' settings without ranks: named, not dropped
    with pytest.raises(ConfigError, match="nproc"):
        built({"backend.kind": "one-process", "backend.nproc": 4})  # flags that contradict each other


def test_a_study_arm_over_its_base_keeps_the_base_kind():
    base = TrainConfig(backend={"kind": "ddp", "nproc": 2}).model_dump(mode="json")
    merged = merge_settings(base, {"backend": {"nproc": 4}}, TrainConfig)
    assert TrainConfig.model_validate(merged).backend == DdpBackend(nproc=4)
    old_base = {"backend": {"nproc": 2, "strategy": "ddp"}}  # a study file written before kinds
    merged = merge_settings(old_base, {"backend": {"precision": "bf16"}}, TrainConfig)
    assert TrainConfig.model_validate(merged).backend == DdpBackend(nproc=2, precision="bf16")
    arms = {"one": {}, "ranks": {"backend": {"nproc": 2}}}
    study = StudyConfig(
        arms={name: {"replay": {"kind": "none"}, **arm} for name, arm in arms.items()}, baseline_arm="one"
    )
    kinds = {name: TrainConfig.model_validate(study.arm_settings(name)).backend.kind for name in arms}
    assert kinds == {"one": "one-process", "ranks": "fsdp2"}


def test_the_prefect_form_offers_one_form_per_kind():
    schema = TrainConfig.model_json_schema()
    backend = schema["properties"]["backend"]
    refs = {ref["$ref"].rsplit("/", 1)[-1] for ref in backend.get("oneOf", backend.get("anyOf", []))}
    assert refs == {"OneProcessBackend", "DdpBackend", "Fsdp2Backend"}
    assert backend["discriminator"]["propertyName"] == "kind"
