"""`precision: auto`: bf16 only where the update's device computes it natively (a CPU with AVX512-BF16 or AMX,
a GPU with native bf16), float32 elsewhere; decided once when the backend is built, logged, and recorded beside
the run's settings, which keep `auto` (so resume and the finished-run check see no change)."""

import json
import logging
from contextlib import nullcontext

import pytest
import torch
from transformers import Qwen2Config

from rlep.tasks.settings.backend import backend_config
from rlep.tasks.settings.train import OptimizerConfig, TrainConfig
from rlep.tasks.training.backends import precision
from rlep.tasks.training.backends.backend import make_backend
from rlep.tasks.training.backends.policy import PolicySpec
from rlep.tasks.training.backends.precision import record_precision, recorded_precision, resolve_precision

# /proc/cpuinfo of the two machines of FIELD_NOTES ("Checked 2026-11-26"), cut to the lines that matter.
XEON_WITHOUT_BF16 = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Processor @ 2.20GHz
flags\t\t: fpu vme sse sse2 ssse3 sse4_1 sse4_2 avx avx2 fma avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni
"""
EPYC_WITH_BF16 = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9B14
flags\t\t: fpu vme sse sse2 avx avx2 fma avx512f avx512dq avx512_vnni avx512_bf16 avx512_vbmi2
"""
SAPPHIRE_RAPIDS = XEON_WITHOUT_BF16.replace("avx512_vnni", "avx512_vnni amx_bf16 amx_tile amx_int8")
GRAVITON3 = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes sha3 sve svebf16 i8mm bf16 dgh rng\n"
GRAVITON2 = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp\n"

TINY = Qwen2Config(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    vocab_size=64,
    tie_word_embeddings=True,
)


def _cpu(monkeypatch, cpuinfo):
    monkeypatch.setattr(precision, "read_cpuinfo", lambda: cpuinfo)


@pytest.mark.parametrize(
    "cpuinfo, expected",
    [(XEON_WITHOUT_BF16, "fp32"), (EPYC_WITH_BF16, "bf16"), (SAPPHIRE_RAPIDS, "bf16"), (GRAVITON3, "bf16"),
     (GRAVITON2, "fp32")],
    ids=["xeon-avx512-only", "epyc-avx512-bf16", "amx-bf16", "arm-bf16", "arm-without"],
)  # fmt: skip
def test_auto_is_bf16_only_on_a_cpu_that_computes_it_natively(monkeypatch, cpuinfo, expected):
    _cpu(monkeypatch, cpuinfo)
    choice = resolve_precision("auto", "cpu")
    assert (choice.setting, choice.precision, choice.device) == ("auto", expected, "cpu")
    assert ("lacks" in choice.reason) == (expected == "fp32")


def test_the_default_backend_trains_in_float32_on_a_cpu_without_bf16(monkeypatch):
    _cpu(monkeypatch, XEON_WITHOUT_BF16)
    assert backend_config().precision == "auto"
    backend = make_backend(PolicySpec(TINY, OptimizerConfig()))
    assert backend.precision.precision == "fp32" and backend.spec.backend.precision == "fp32"
    assert _logits_dtype(backend) == torch.float32

    _cpu(monkeypatch, EPYC_WITH_BF16)
    backend = make_backend(PolicySpec(TINY, OptimizerConfig()))
    assert backend.precision.precision == "bf16" and _logits_dtype(backend) == torch.bfloat16  # autocast
    assert all(p.dtype == torch.float32 for p in backend.model.parameters())  # master weights stay float32


def _logits_dtype(backend):
    with torch.no_grad():
        return backend.model(torch.tensor([[1, 2, 3]])).logits.dtype


def test_an_explicit_precision_is_kept_whatever_the_cpu(monkeypatch):
    _cpu(monkeypatch, XEON_WITHOUT_BF16)
    assert resolve_precision("bf16", "cpu").precision == "bf16"
    _cpu(monkeypatch, EPYC_WITH_BF16)
    assert resolve_precision("fp32", "cpu").precision == "fp32"


def test_an_unreadable_cpu_falls_back_to_torch_then_to_float32(monkeypatch):
    _cpu(monkeypatch, None)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    assert resolve_precision("auto", "cpu").precision == "bf16"
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported")
    choice = resolve_precision("auto", "cpu")
    assert choice.precision == "fp32" and "could not be read" in choice.reason


def _gpu(monkeypatch, name, native, emulated=True, old_torch=False):
    def is_bf16_supported(*args, **kwargs):
        if old_torch and kwargs:
            raise TypeError("is_bf16_supported() got an unexpected keyword argument 'including_emulation'")
        return native or (emulated and kwargs.get("including_emulation", True) and not old_torch)

    monkeypatch.setattr(torch.cuda, "device", lambda device: nullcontext())
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: name)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", is_bf16_supported)


@pytest.mark.parametrize(
    "name, native, old_torch, expected",
    [
        ("NVIDIA H100 80GB HBM3", True, False, "bf16"),
        ("Tesla V100-SXM2-16GB", False, False, "fp32"),  # emulated bf16 does not count
        ("NVIDIA A100-SXM4-40GB", True, True, "bf16"),
        ("Tesla T4", False, True, "fp32"),
    ],
)
def test_auto_on_a_gpu_asks_for_native_bf16(monkeypatch, name, native, old_torch, expected):
    _gpu(monkeypatch, name, native, old_torch=old_torch)
    _cpu(monkeypatch, EPYC_WITH_BF16)  # the CPU's flags play no part on a GPU
    choice = resolve_precision("auto", "cuda:0")
    assert (choice.precision, choice.device) == (expected, "cuda:0") and name in choice.reason


def test_the_choice_is_logged_and_recorded_per_start_of_the_run(monkeypatch, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="rlep.train")
    _cpu(monkeypatch, EPYC_WITH_BF16)
    record_precision(tmp_path, resolve_precision("auto", "cpu"), step=0)
    assert "precision auto -> bf16 on cpu: the CPU has avx512_bf16" in caplog.text
    _cpu(monkeypatch, XEON_WITHOUT_BF16)  # resumed at step 4 on another machine, after a start at step 6 was killed
    record_precision(tmp_path, resolve_precision("auto", "cpu"), step=6)
    record_precision(tmp_path, resolve_precision("auto", "cpu"), step=4)
    starts = recorded_precision(tmp_path)
    assert [(s["step"], s["precision"]) for s in starts] == [(0, "bf16"), (4, "fp32")]
    assert "trained in bf16 before step 4 and continues in fp32" in caplog.text
    record_precision(tmp_path, resolve_precision("auto", "cpu"), step=0)  # a fresh start forgets the old run
    assert [s["step"] for s in recorded_precision(tmp_path)] == [0]


def test_a_run_records_the_resolved_precision_and_keeps_auto_in_its_settings(monkeypatch, tmp_path):
    """Trainer wiring: OUT/resolved_settings.json says what `auto` became, train_config.json still says `auto`,
    and the reuse checks see the same settings (no restart of a killed run, no retraining of a finished one)."""
    from rlep.tasks import reuse
    from rlep.tasks.training.loop.steps import Trainer

    _cpu(monkeypatch, XEON_WITHOUT_BF16)
    monkeypatch.setattr(Trainer, "_start_engine", lambda self, weights: None)
    monkeypatch.setattr("rlep.tasks.training.loop.steps.RolloutFeed", lambda *a, **k: None)
    monkeypatch.setattr("rlep.tasks.training.loop.steps.resolve_model", lambda model, progress: model)
    model = tmp_path / "model"
    _save_tiny_model(model)
    config = TrainConfig.model_validate(
        {"model": str(model), "out": str(tmp_path / "run"), "problems": {"source": "tiny-math", "limit": 8}}
    )
    trainer = Trainer(config, progress=False)
    assert trainer.backend.precision.precision == "fp32"
    saved = json.loads((tmp_path / "run" / "train_config.json").read_text())
    assert saved["backend"]["precision"] == "auto"
    [start] = recorded_precision(tmp_path / "run")
    assert (start["setting"], start["precision"], start["step"]) == ("auto", "fp32", 0)
    assert "lacks avx512_bf16" in start["reason"]
    assert reuse.same_training(tmp_path / "run", config)


def test_a_run_saved_before_auto_compares_as_auto_where_auto_picks_its_precision(monkeypatch, tmp_path):
    """Settings saved with the old default `fp32` (or real-quick's `bf16`) read as `auto` on a machine where
    `auto` picks that precision: such a run is resumed, not started over; elsewhere it is another training."""
    from rlep.data.run_layout import TrainRunLayout
    from rlep.tasks import reuse

    old = TrainConfig(out=str(tmp_path), backend={"precision": "fp32"})
    TrainRunLayout(tmp_path).config.write_text(old.model_dump_json())
    today = TrainConfig(out=str(tmp_path))
    _cpu(monkeypatch, XEON_WITHOUT_BF16)
    assert reuse.same_training(tmp_path, today)
    _cpu(monkeypatch, EPYC_WITH_BF16)
    assert not reuse.same_training(tmp_path, today)
    assert reuse.same_training(tmp_path, old)


def _save_tiny_model(directory):
    """A tiny random Qwen2 with the tiny model's tokenizer, as an HF directory."""
    from transformers import AutoModelForCausalLM

    from rlep.data.tokenizer import build_tokenizer

    tokenizer = build_tokenizer()
    config = Qwen2Config(**{**TINY.to_dict(), "vocab_size": len(tokenizer)})
    AutoModelForCausalLM.from_config(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
