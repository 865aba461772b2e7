"""Named model shapes (public models' config.json, built with random weights) and GPUs' peak FLOP/s, for the
benchmarks (`rlep bench update`, `rlep bench gpu`)."""

from __future__ import annotations

from typing import Any

# Shapes of public models (their config.json), built with random weights.
MODEL_CONFIGS: dict[str, dict[str, Any]] = {
    "tiny": dict(
        model_type="qwen2",
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
        tie_word_embeddings=True,
    ),
    "smollm2-135m": dict(
        model_type="llama",
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        vocab_size=49152,
        tie_word_embeddings=True,
        rope_theta=100000.0,
    ),
    "qwen2.5-0.5b": dict(
        model_type="qwen2",
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
    "qwen2.5-1.5b": dict(
        model_type="qwen2",
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
    "qwen2.5-7b": dict(
        model_type="qwen2",
        hidden_size=3584,
        intermediate_size=18944,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        vocab_size=152064,
        tie_word_embeddings=False,
    ),
}

# Dense peak tensor FLOP/s by precision (vendor data sheets, without sparsity), matched in this order against
# torch.cuda.get_device_name(): the more specific names first. The H200 has the H100 SXM's compute.
PEAK_TFLOPS = (
    ("H200", {"bf16": 989.0, "fp32": 67.0}),
    ("H100 PCIe", {"bf16": 756.0, "fp32": 51.0}),
    ("H100 NVL", {"bf16": 835.0, "fp32": 60.0}),
    ("H100", {"bf16": 989.0, "fp32": 67.0}),  # SXM: "NVIDIA H100 80GB HBM3"
    ("A100", {"bf16": 312.0, "fp32": 19.5}),
    ("L40S", {"bf16": 362.0, "fp32": 91.6}),
    ("L4", {"bf16": 121.0, "fp32": 30.3}),
    ("A10G", {"bf16": 70.0, "fp32": 31.2}),
)


def peak_tflops(name: str, precision: str = "bf16") -> float | None:
    """The dense peak of the GPU named `name` (torch.cuda.get_device_name()) in `precision`, or None if unknown."""
    return next((table[precision] for key, table in PEAK_TFLOPS if key in name), None)


def model_config(name: str):
    """The HF config of a named shape (random weights are drawn from it)."""
    from transformers import AutoConfig

    if name not in MODEL_CONFIGS:
        raise ValueError(f"model config {name!r}: not one of {sorted(MODEL_CONFIGS)}")
    shape = dict(MODEL_CONFIGS[name])
    return AutoConfig.for_model(shape.pop("model_type"), **shape)
