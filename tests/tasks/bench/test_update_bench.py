"""`python -m tasks.bench.update`: the update benchmark on synthetic rollouts, without vLLM or Prefect."""

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from rlep.tasks.bench.update import (
    UpdateBenchConfig,
    answer_lengths,
    attention_flops,
    bench_update,
    model_config,
    summary,
    synthetic_batch,
)


def test_synthetic_batch_is_groups_of_fixed_length_answers_with_grpo_advantages():
    batch = synthetic_batch(3, 4, 5, 7, 100, seed=0)
    assert batch.input_ids.shape == (12, 12) and int(batch.mask.sum()) == 12 * 7
    assert batch.group.tolist() == [g for g in range(3) for _ in range(4)]
    for g in range(3):  # group-normalised: each group's advantages sum to zero
        assert abs(float(batch.advantages[batch.group == g].sum())) < 1e-5


def test_update_bench_writes_its_report(tmp_path):
    out = tmp_path / "update.json"
    report = bench_update(
        UpdateBenchConfig(
            prompts=2,
            group_size=2,
            prompt_tokens=4,
            response_tokens=6,
            micro_batch_size=2,
            warmup=0,
            steps=2,
            peak_tflops=1.0,
            out=out,
        )
    )
    assert json.loads(out.read_text())["tokens_per_step"] == report["tokens_per_step"] == 2 * 2 * 10
    assert report["tokens_per_second"] > 0 and 0 < report["mfu"] < 1
    rank = report["ranks"][0]
    assert rank["param_bytes"] == 4 * report["parameters"] and rank["optimizer_bytes"] >= 2 * rank["param_bytes"]


def test_named_shapes_match_the_public_models():
    smol = model_config("smollm2-135m")
    assert (
        smol.hidden_size,
        smol.num_hidden_layers,
        smol.num_attention_heads,
        smol.num_key_value_heads,
        smol.vocab_size,
    ) == (576, 30, 9, 3, 49152)
    assert smol.tie_word_embeddings


def test_update_bench_imports_neither_vllm_nor_prefect():
    code = (
        "import sys, rlep.tasks.bench.update, rlep.tasks.training.backends.backend, "
        "rlep.tasks.training.backends.distributed; "
        "print(sorted({m.split('.')[1] if m.startswith('rlep.') else m.split('.')[0] for m in sys.modules} & "
        "{'vllm', 'prefect', 'ray', 'flows'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _kl_bench(tmp_path, **settings):
    return bench_update(
        UpdateBenchConfig(
            prompts=2,
            group_size=2,
            prompt_tokens=4,
            response_tokens=6,
            micro_batch_size=2,
            updates_per_epoch=2,  # the no-grad old-log-prob pass runs
            kl=True,
            warmup=0,
            steps=1,
            out=tmp_path / "update.json",
            **settings,
        )
    )


def test_update_bench_reports_the_kl_reference_and_the_peaks_of_building_and_of_the_steps(tmp_path):
    """Per rank: the KL reference's bytes beside the policy's, and the peak memory while building and during the
    steps apart (the old-log-prob pass and the reference forward inside the steps); FSDP2 halves the reference."""
    rank = _kl_bench(tmp_path)["ranks"][0]
    assert rank["reference_bytes"] == rank["param_bytes"] > 0  # same shape, float32
    assert rank["build_peak_rss_bytes"] > 0 and rank["peak_rss_bytes"] > 0
    ranks = _kl_bench(tmp_path, nproc=2, strategy="fsdp2")["ranks"]
    assert len(ranks) == 2
    for sharded in ranks:
        assert sharded["reference_bytes"] < 0.7 * rank["reference_bytes"]  # the root's embedding counts whole
        assert sharded["build_peak_rss_bytes"] > 0 and sharded["peak_rss_bytes"] > 0


def test_mfu_counts_4n_a_token_with_lora_and_6n_otherwise(tmp_path):
    """A LoRA update computes no gradient for its frozen weights: its model FLOPs are 4N a token, not 6N (an H100
    run of the 7B shape with LoRA read 31% MFU by 6N; it spends two thirds of that)."""
    small = dict(prompts=2, group_size=2, prompt_tokens=4, response_tokens=6, micro_batch_size=2, warmup=0, steps=1)
    full = bench_update(UpdateBenchConfig(**small, peak_tflops=1.0, out=tmp_path / "full.json"))
    lora = bench_update(UpdateBenchConfig(**small, peak_tflops=1.0, lora_rank=4, out=tmp_path / "lora.json"))
    n = full["flop_parameters"]
    assert lora["flop_parameters"] == n
    assert (full["flops_per_token"], lora["flops_per_token"]) == (6 * n, 4 * n)
    for report in (full, lora):
        expected = report["flops_per_token"] * report["tokens_per_step"] / report["step_seconds_median"] / 1e12
        assert abs(report["mfu"] - expected) <= 1e-12 * expected
    assert "% by 6N, " in summary(full) and "% by 4N, " in summary(lora)  # the printed line names the count used


def test_attention_flops_follow_torchtitans_12_l_h_q_t_a_token_by_hand():
    """torchtitan counts 12 L H Q T FLOPs a token for attention (T: the sequence's length; the full square, not
    the causal half): a sequence of T tokens costs 12 L H Q T^2. By hand for 2 layers, 4 query heads of width 16
    (hidden 64; the 2 key/value heads of grouped-query attention do not shrink the products), sequences of 3 and
    5 tokens: 12 * 2 * 4 * 16 * (9 + 25) = 1,536 * 34 = 52,224."""
    tiny = model_config("tiny")
    assert (tiny.num_hidden_layers, tiny.num_attention_heads, tiny.hidden_size, tiny.num_key_value_heads) == (
        2,
        4,
        64,
        2,
    )
    assert attention_flops(tiny, [3, 5]) == 52_224
    assert attention_flops(tiny, []) == 0
    # a head width of its own (Qwen3's head_dim is not hidden / heads): 12 * 1 * 2 * 32 * 10^2
    wide = SimpleNamespace(num_hidden_layers=1, num_attention_heads=2, hidden_size=16, head_dim=32)
    assert attention_flops(wide, [10]) == 76_800


def test_varied_answer_lengths_keep_one_shape_per_run_and_mfu_counts_attention_on_top_of_6n(tmp_path):
    """`--response-lengths varied`: answers of lengths drawn once for the run (not all the same), every step the
    same tokens; `mfu_with_attention` = (6N tokens + the attention FLOPs of those sequences) / time / peak."""
    settings = dict(prompts=2, group_size=3, prompt_tokens=4, response_tokens=12, micro_batch_size=2, warmup=1, steps=2)
    report = bench_update(
        UpdateBenchConfig(**settings, response_lengths="varied", peak_tflops=1.0, out=tmp_path / "varied.json")
    )
    lengths = answer_lengths(6, 12)
    assert len(set(lengths)) > 1 and max(lengths) <= 12 and min(lengths) >= 1
    sequences = [4 + n for n in lengths]
    assert report["tokens_per_step"] == sum(sequences)
    assert report["sequence_tokens"] == {"min": min(sequences), "max": max(sequences), "mean": sum(sequences) / 6}
    attention = attention_flops(model_config("tiny"), sequences)
    assert report["attention_flops_per_step"] == attention > 0
    model = report["flops_per_token"] * report["tokens_per_step"]
    expected = (model + attention) / report["step_seconds_median"] / 1e12
    assert abs(report["mfu_with_attention"] - expected) <= 1e-12 * expected
    assert report["mfu_with_attention"] / report["mfu"] == pytest.approx((model + attention) / model)
    batch = synthetic_batch(2, 3, 4, 12, 100, seed=5, lengths=lengths)
    assert batch.mask.sum(-1).tolist() == lengths


def test_the_update_bench_takes_the_long_sequence_lines_settings():
    """The acceptance check's long-sequence line (varied lengths, activation checkpointing, KL) is a valid bench."""
    config = UpdateBenchConfig(
        model="qwen2.5-1.5b", response_tokens=4096, response_lengths="varied", activation_checkpointing=True, kl=True
    )
    assert (config.response_lengths, config.activation_checkpointing, config.kl) == ("varied", True, True)
    with pytest.raises(ValueError):
        UpdateBenchConfig(response_lengths="ragged")
