"""`rlep bench update` / `python -m rlep.tasks.bench.update`: the policy update alone, on synthetic rollouts.

Times one step's update (`policy_update` through the training backend: one process, or DDP / FSDP2 over
`--nproc` processes) for a model built from a Hugging Face config with random weights (nothing downloaded),
on fixed-length random token groups with 0/1 rewards and GRPO advantages: no vLLM, no Prefect, no pool.
It imports torch, transformers, pydantic, numpy and the project's training modules only, so it runs on any
machine with torch and transformers.

Reports, after `warmup` untimed steps: step time (median), update tokens/s (prompt + completion tokens through
forward and backward per second, summed over ranks), MFU counted two ways: `mfu` = 6 N tokens / time / peak
FLOPs (4 N with LoRA, whose frozen weights get no gradient; N: parameters without the input embedding, whose
lookup costs no FLOPs), and `mfu_with_attention`, which adds the attention's score and value products the way
torchtitan counts them (`attention_flops`); neither counts the no-grad old-log-prob pass (several updates a
step), the KL reference's forward or activation checkpointing's recomputed forward, so both are lower bounds
of the work done. Answers are all `response_tokens` long, or (`--response-lengths varied`) of lengths drawn
once for the run from 1..response_tokens, the same every step. Per rank the bytes of parameters, gradients,
optimizer state and KL reference (`--kl`) it holds (the figures FSDP2 divides by the number of ranks) and its
peak memory (VmHWM on the CPU, CUDA's peak allocation on a GPU: tasks/training/backends/memory.py) twice: while the
model is built and loaded, and during the steps (old-log-prob pass, reference forward and update included:
`--updates-per-epoch 2 --kl`). Writes the report as JSON.

Run: `python -m rlep.tasks.bench.update --model-config smollm2-135m --nproc 2 --strategy fsdp2`
     `python -m rlep.tasks.bench.update --device cuda --precision bf16 --model-config qwen2.5-1.5b`
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlep.tasks.bench.flags import add_flags, settings
from rlep.tasks.bench.shapes import MODEL_CONFIGS, PEAK_TFLOPS, model_config, peak_tflops  # noqa: F401 (re-exported)

if TYPE_CHECKING:
    import torch


# `--model-config`, the other spelling of `--model` (both entry points keep it)
MODEL_CONFIG_HELP = "Alias of --model."


class UpdateBenchConfig(BaseModel):
    """Settings of one update benchmark."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field("tiny", description=f"Model shape, random weights: one of {sorted(MODEL_CONFIGS)}.")
    nproc: int = Field(1, ge=1, le=1024, description="Processes (torchrun standalone); 1 = one process.")
    strategy: Literal["ddp", "fsdp2"] = Field("fsdp2", description="nproc > 1: ddp (replicas) or fsdp2 (shards).")
    precision: Literal["fp32", "bf16"] = Field("fp32", description="bf16: bf16 compute, fp32 master weights.")
    activation_checkpointing: bool = Field(False, description="Recompute decoder layers' activations in the backward.")
    device: Literal["cpu", "cuda"] = Field("cpu", description="cuda: one GPU per rank (LOCAL_RANK).")
    prompts: int = Field(8, ge=1, le=100_000, description="Prompts per step (groups).")
    group_size: int = Field(8, ge=1, le=4096, description="Answers per prompt.")
    prompt_tokens: int = Field(64, ge=1, le=1_000_000, description="Tokens of every prompt.")
    response_tokens: int = Field(128, ge=1, le=1_000_000, description="Tokens of every answer (varied: the longest).")
    response_lengths: Literal["fixed", "varied"] = Field(
        "fixed",
        description="fixed: every answer response_tokens long; varied: lengths drawn uniformly from "
        "1..response_tokens (seeded, once for the run: every step has the same shape), as real answers differ.",
    )
    updates_per_epoch: int = Field(
        1,
        ge=1,
        le=10_000,
        description="Optimizer updates (mini-batches) per step; above 1 the no-grad old-log-prob pass runs.",
    )
    kl: bool = Field(
        False,
        description="A KL term against a frozen reference of the same shape (sharded like the policy; under LoRA the "
        "policy's base with its adapters off).",
    )
    micro_batch_size: int = Field(8, ge=1, le=100_000, description="Sequences per forward/backward on a rank.")
    lora_rank: int = Field(
        0,
        ge=0,
        le=4096,
        description="LoRA adapters of this rank (alpha 2 x rank) on every attention and MLP projection instead of "
        "full fine-tuning (nproc 1); 0: full fine-tuning.",
    )
    warmup: int = Field(1, ge=0, le=1000, description="Untimed steps first.")
    steps: int = Field(3, ge=1, le=10_000, description="Timed steps.")
    peak_tflops: float | None = Field(
        None, gt=0, description="Peak FLOP/s per device in TFLOP/s for MFU; default: the GPU table."
    )
    out: Path = Field(Path("bench/results/update.json"), description="JSON report.")

    @model_validator(mode="after")
    def _lora_in_one_process(self) -> UpdateBenchConfig:
        if self.lora_rank and self.nproc > 1:
            raise ValueError(f"lora_rank {self.lora_rank}: one process only (nproc is {self.nproc})")
        return self

    def hf_config(self):
        return model_config(self.model)


def answer_lengths(count: int, response_tokens: int, seed: int = 0) -> list[int]:
    """`count` answer lengths drawn uniformly from 1..response_tokens (`--response-lengths varied`)."""
    import torch  # here, not at module level: `rlep --help` must not load torch

    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, response_tokens + 1, (count,), generator=g).tolist()


def synthetic_batch(
    prompts: int,
    group_size: int,
    prompt_tokens: int,
    response_tokens: int,
    vocab: int,
    seed: int,
    varied: bool = False,
    lengths: list[int] | None = None,
):
    """A step's batch without generation: per prompt, `group_size` random answers with 0/1 rewards and
    group-normalised (GRPO) advantages; behaviour log-probs random. Answer lengths: `lengths` (one per answer,
    prompt by prompt) where given; else `varied`: drawn 1..response_tokens here (tests); else all
    `response_tokens` long."""
    import torch  # here, not at module level: `rlep --help` must not load torch

    from rlep.data.rollout import Rollout
    from rlep.tasks.training.maths.batch import build_batch

    g = torch.Generator().manual_seed(seed)
    rollouts, groups = [], []
    for p in range(prompts):
        prompt = torch.randint(1, vocab, (prompt_tokens,), generator=g).tolist()
        rewards = (torch.rand(group_size, generator=g) < 0.5).float()
        advantages = (rewards - rewards.mean()) / (rewards.std(unbiased=False) + 1e-6) if group_size > 1 else rewards
        for i in range(group_size):
            if lengths is not None:
                length = lengths[p * group_size + i]
            else:
                length = int(torch.randint(1, response_tokens + 1, (), generator=g)) if varied else response_tokens
            response = torch.randint(1, vocab, (length,), generator=g).tolist()
            rollout = Rollout(
                problem_id=str(p),
                data_source="synthetic",
                prompt="",
                gold_answer="",
                response="",
                response_token_ids=response,
                policy_version=0,
                prompt_token_ids=prompt,
                behaviour_logprobs=(-3 * torch.rand(length, generator=g)).tolist(),
                sample_index=i,
            )
            rollout.reward, rollout.advantage = float(rewards[i]), float(advantages[i])
            rollouts.append(rollout)
            groups.append(p)
    return build_batch(rollouts, 0, 1, groups)


def peak_flops(config: UpdateBenchConfig) -> float | None:
    import torch  # here, not at module level: `rlep --help` must not load torch

    if config.peak_tflops:
        return config.peak_tflops * 1e12
    if config.device == "cuda" and torch.cuda.is_available():
        peak = peak_tflops(torch.cuda.get_device_name(), config.precision)
        return peak * 1e12 if peak else None
    return None


def flop_parameters(model_config) -> int:
    """Parameters that cost 2 FLOPs per token forward: all but the input embedding (a lookup); a tied head
    shares its matrix with the embedding but is a real matmul, so it counts."""
    import torch  # here, not at module level: `rlep --help` must not load torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(model_config)
    total = sum(p.numel() for p in model.parameters())
    embedding = model.get_input_embeddings().weight.numel()
    return total - embedding + (embedding if model_config.tie_word_embeddings else 0)


def run(config: UpdateBenchConfig) -> dict[str, Any]:
    """Rank 0 (or the only process): build the backend, time the steps, gather per-rank memory."""
    import torch  # here, not at module level: `rlep --help` must not load torch

    from rlep.tasks.settings.backend import LoraConfig, backend_config
    from rlep.tasks.settings.train import LossConfig, OptimizerConfig
    from rlep.tasks.training.backends.backend import make_backend
    from rlep.tasks.training.backends.policy import PolicySpec
    from rlep.tasks.training.maths.update import UpdateSettings

    hf = config.hf_config()
    backend_settings = backend_config(
        nproc=config.nproc,
        strategy=config.strategy,
        precision=config.precision,
        activation_checkpointing=config.activation_checkpointing,
    )
    reference = hf if config.kl else None  # random weights of the same shape (LoRA: the base, adapters off)
    lora = LoraConfig(rank=config.lora_rank, alpha=2.0 * config.lora_rank) if config.lora_rank else None
    spec = PolicySpec(hf, OptimizerConfig(lr=1e-5), backend_settings, reference, device=config.device, lora=lora)
    backend = make_backend(spec)
    device = getattr(backend, "device", torch.device(config.device))
    built = _memory(backend, device, reset=True)  # the peaks of building and loading; then the steps' own
    times, tokens = [], []
    generator = torch.Generator().manual_seed(0)
    lengths = (
        answer_lengths(config.prompts * config.group_size, config.response_tokens)
        if config.response_lengths == "varied"
        else None
    )
    settings = UpdateSettings(
        LossConfig(kl_coef=0.1 if config.kl else 0.0),
        1.0,
        updates_per_epoch=config.updates_per_epoch,
        micro_batch_size=config.micro_batch_size,
    )
    try:
        for step in range(config.warmup + config.steps):
            batch = synthetic_batch(
                config.prompts,
                config.group_size,
                config.prompt_tokens,
                config.response_tokens,
                hf.vocab_size,
                seed=step,
                lengths=lengths,
            )
            _sync(device)
            start = time.perf_counter()
            backend.update(batch, settings, generator=generator)
            _sync(device)
            if step >= config.warmup:
                times.append(time.perf_counter() - start)
                tokens.append(int(batch.attention_mask.sum()))
        memory = _memory(backend, device)
    finally:
        backend.close()
    seconds = statistics.median(times)
    tokens_per_step = int(statistics.median(tokens))  # every step has the same shape
    n_flop = flop_parameters(hf)
    peak = peak_flops(config)
    flops_per_token = model_flops_per_token(n_flop, lora=bool(config.lora_rank))
    answers = lengths or [config.response_tokens] * (config.prompts * config.group_size)
    sequences = [config.prompt_tokens + n for n in answers]
    attention = attention_flops(hf, sequences)
    step_flops = flops_per_token * tokens_per_step
    report = {
        "bench": "update",
        "config": config.model_dump(mode="json"),
        "parameters": sum(p.numel() for p in backend.model.parameters()) if config.nproc == 1 else None,
        "trained_parameters": (
            sum(p.numel() for p in backend.model.parameters() if p.requires_grad) if config.nproc == 1 else None
        ),
        "flop_parameters": n_flop,
        "tokens_per_step": tokens_per_step,
        "step_seconds": times,
        "step_seconds_median": seconds,
        "tokens_per_second": tokens_per_step / seconds,
        "flops_per_token": flops_per_token,
        "attention_flops_per_step": attention,
        "sequence_tokens": {"min": min(sequences), "max": max(sequences), "mean": statistics.fmean(sequences)},
        "mfu": step_flops / seconds / (peak * config.nproc) if peak else None,
        "mfu_with_attention": (step_flops + attention) / seconds / (peak * config.nproc) if peak else None,
        "peak_flops_per_device": peak,
        "ranks": [
            {**m, **{f"build_{k}": v for k, v in b.items() if k.startswith("peak")}} for m, b in zip(memory, built)
        ],
        "machine": {
            "platform": platform.platform(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "device": torch.cuda.get_device_name() if config.device == "cuda" else platform.processor(),
        },
    }
    report["parameters"] = report["parameters"] or sum(p.numel() for p in _meta_model(hf).parameters())
    return report


def _meta_model(hf):
    import torch  # here, not at module level: `rlep --help` must not load torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(hf)


def _memory(backend, device, reset: bool = False) -> list[dict[str, float]]:
    """Per rank: the training state and KL reference held, and the peak memory since the last reset."""
    if hasattr(backend, "memory"):
        return backend.memory(reset)
    from rlep.tasks.training.backends.memory import rank_memory, reset_peak

    facts = [rank_memory(backend.model, backend.optimizer, device, backend.reference)]
    if reset:
        reset_peak(device)
    return facts


def _sync(device: torch.device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def summary(report: dict[str, Any]) -> str:
    config = report["config"]
    mib = 2**20
    lines = [
        f"update bench: {config['model']} ({report['parameters'] / 1e6:.1f}M parameters), nproc {config['nproc']}"
        + (f" {config['strategy']}" if config["nproc"] > 1 else "")
        + f", {config['precision']}, {config['device']}",
        f"  step {report['step_seconds_median']:.3f} s (median of {len(report['step_seconds'])}), "
        f"{report['tokens_per_step']} tokens/step, {report['tokens_per_second']:.0f} tokens/s, "
        + (
            f"MFU {100 * report['mfu']:.1f}% by {report['flops_per_token'] // report['flop_parameters']}N, "
            f"{100 * report['mfu_with_attention']:.1f}% with attention"
            if report["mfu"] is not None
            else "MFU n/a (pass --peak-tflops)"
        ),
    ]
    for rank, m in enumerate(report["ranks"]):
        state = m["param_bytes"] + m["optimizer_bytes"]
        kind = "cuda" if "peak_cuda_bytes" in m else "rss"
        lines.append(
            f"  rank {rank}: parameters + optimizer {state / mib:.1f} MiB (grads {m['grad_bytes'] / mib:.1f} MiB, "
            f"KL reference {m.get('reference_bytes', 0) / mib:.1f} MiB), peak {kind.upper()} while building "
            f"{m.get(f'build_peak_{kind}_bytes', 0) / mib:.0f} MiB, "
            f"during the steps {m[f'peak_{kind}_bytes'] / mib:.0f} MiB"
        )
    return "\n".join(lines)


def bench_update(config: UpdateBenchConfig) -> dict[str, Any]:
    """Run the benchmark (launching `nproc` processes when more than one) and return rank 0's report."""
    if config.nproc > 1 and "RANK" not in os.environ:
        from rlep.tasks.training.backends.launch import launch

        request = config.out.with_suffix(".request.json")
        request.parent.mkdir(parents=True, exist_ok=True)
        request.write_text(config.model_dump_json())
        try:
            launch("rlep.tasks.bench.update", ["--request", str(request)], config.nproc)
        finally:
            request.unlink(missing_ok=True)
        return json.loads(config.out.read_text())
    report = run(config)
    config.out.parent.mkdir(parents=True, exist_ok=True)
    config.out.write_text(json.dumps(report, indent=2))
    return report


def model_flops_per_token(n_flop: int, *, lora: bool) -> int:
    """The model FLOPs an update spends per token: forward 2N, backward 2N for the activations' gradients and 2N
    for the weights' (6N). With LoRA the frozen weights get no gradient (4N); the adapters' own FLOPs, a fraction
    of a percent at the ranks used, are left out. Activation checkpointing's recomputed forward is not model
    FLOPs and is never counted."""
    return (4 if lora else 6) * n_flop


def attention_flops(model_config, sequence_lengths: list[int]) -> int:
    """The FLOPs of one step's attention products (Q K^T and the weights times V; the projections are in 6N),
    forward and backward, over sequences of the given lengths (prompt + answer, padding not counted).

    torchtitan's convention (`get_num_flop_per_token`: 6 N + 12 L H Q T a token): per layer and token, the two
    products cost 2 x 2 H Q T forward (a multiply and an add per term; H query heads of width Q over the T
    positions of the sequence; grouped-query attention's fewer key/value heads do not shrink the products)
    and twice that backward, 12 H Q T in all. Like torchtitan this counts the full T x T square, not the
    causal mask's half, and not flash attention's recomputation in the backward; also with LoRA (the products
    have no weights, both of their inputs' gradients are computed). A sequence of T tokens costs 12 L H Q T^2."""
    layers, heads = model_config.num_hidden_layers, model_config.num_attention_heads
    head_dim = getattr(model_config, "head_dim", None) or model_config.hidden_size // heads
    return sum(12 * layers * heads * head_dim * length * length for length in sequence_lengths)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlep.tasks.bench.update", description=__doc__.split("\n\n")[0])
    add_flags(parser, UpdateBenchConfig)
    parser.add_argument("--model-config", dest="model", default=argparse.SUPPRESS, help=MODEL_CONFIG_HELP)
    parser.add_argument("--request", type=Path, default=None, help=argparse.SUPPRESS)  # one rank of a launched run
    args = parser.parse_args(argv)
    if args.request is not None:
        return _rank(UpdateBenchConfig.model_validate_json(args.request.read_text()))
    report = bench_update(settings(UpdateBenchConfig, parser, args))
    print(summary(report))
    print(f"report: {report['config']['out']}")
    return 0


def _rank(config: UpdateBenchConfig) -> int:
    """One process of a launched benchmark: rank 0 measures and writes, the others follow."""
    from rlep.tasks.settings.backend import backend_config
    from rlep.tasks.training.backends.distributed import init_distributed, serve, shutdown, stop_serving

    rank = init_distributed(backend_config(kind=config.strategy, nproc=config.nproc))
    try:
        if rank == 0:
            try:
                report = run(config)
            finally:
                stop_serving()
            config.out.parent.mkdir(parents=True, exist_ok=True)
            config.out.write_text(json.dumps(report, indent=2))
        else:
            serve()
    finally:
        shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
