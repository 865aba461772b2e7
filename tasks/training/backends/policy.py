"""The policy a backend trains: what it is (`PolicySpec`, all a rank needs to build its copy) and how a backend
builds it: the float32 policy, its frozen KL reference, activation checkpointing, and the optimizer.

Both backends (tasks/training/backends/backend.py, tasks/training/backends/distributed.py) build from here; a
distributed rank builds on the meta device instead of reading the weights itself (tasks/training/backends/meta_load.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch

from rlep.tasks.settings.backend import BackendConfig, LoraConfig, OneProcessBackend
from rlep.tasks.settings.train import OptimizerConfig
from rlep.tasks.training.backends.precision import PrecisionChoice, resolve_precision


@dataclass(frozen=True)
class PolicySpec:
    """What to train: all a rank needs to build its copy of the policy (rank 0 sends it to the others)."""

    weights: Any  # HF-format directory (or hub name) of the starting policy, or an HF config: random weights
    optimizer: OptimizerConfig
    backend: BackendConfig = field(default_factory=OneProcessBackend)
    reference: Any = None  # frozen reference for the KL term (like `weights`); None = no KL. Under LoRA any value
    # means KL to the base the adapters sit on (lora.AdaptersOff: no second copy), which `of_run` makes the start
    device: str = "cpu"  # one process's device; a distributed rank uses its own local GPU or the CPU
    init_seed: int = 0  # seeds the random weights of a policy given as a config (the same on every rank)
    lora: LoraConfig | None = None  # adapters on a frozen base (backends/lora.py); None: every weight trains

    @classmethod
    def of_run(cls, config, weights: str, base_model: str) -> PolicySpec:
        """A training run's policy (`config`: a TrainConfig): its weights, optimizer and backend, the starting model
        as KL reference when KL is on, on the CPU or the first GPU the generator does not use. With LoRA the base
        is always the starting model (and so the KL reference, with the adapters off): a resume's adapters come
        from its trainer state, not from `weights` (the checkpoint's merged model)."""
        from rlep.tasks.training.generation.async_gen import update_device

        device = update_device(config.generator_gpus, torch.cuda.device_count())
        reference = base_model if config.loss.kl_coef > 0 else None
        weights = base_model if config.lora is not None else weights
        return cls(weights, config.optimizer, config.backend, reference, device, lora=config.lora)

    def resolved(self, device: str | torch.device) -> tuple[PolicySpec, PrecisionChoice]:
        """This spec with its precision made concrete for `device` (`auto`: bf16 where it is native), and why."""
        choice = resolve_precision(self.backend.precision, device)
        return replace(self, backend=self.backend.model_copy(update={"precision": choice.precision})), choice


def load_policy(
    weights: Any, device: torch.device, config: BackendConfig, init_seed: int = 0, lora: LoraConfig | None = None
) -> torch.nn.Module:
    """The policy in float32 on `device` (master weights even under bf16), in eval mode, with LoRA adapters when
    `lora` is set (under bf16 their frozen base layers are held in bf16: `lora.frozen_base_in_bf16`). `weights`: a
    directory or hub name, or an HF config (random weights drawn on the CPU from `init_seed`: identical on every
    rank, nothing read from disk; benchmarks and tests)."""
    from transformers import AutoModelForCausalLM

    if isinstance(weights, str):
        model = AutoModelForCausalLM.from_pretrained(weights, dtype=torch.float32)
    else:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(init_seed)
            model = AutoModelForCausalLM.from_config(weights, dtype=torch.float32)
    model = checkpoint_activations(model, config)
    if lora is not None:
        from rlep.tasks.training.backends.lora import frozen_base_in_bf16, with_lora

        model = with_lora(model, lora)
        if config.precision == "bf16":
            model = frozen_base_in_bf16(model)  # before the move: the device never holds the float32 base
    return model.to(device).eval()


def checkpoint_activations(model: torch.nn.Module, config: BackendConfig) -> torch.nn.Module:
    """`model` with activation checkpointing on where `config` asks for it (non-reentrant: works under DDP and
    FSDP2, inputs need no grad)."""
    if config.activation_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def load_reference(path: Any, device: torch.device, precision: str = "fp32") -> torch.nn.Module | None:
    """The frozen reference of the KL term in the compute dtype (bf16 under `precision` bf16: it only runs
    forward, so no float32 master copy is needed). A distributed backend shards it like the policy. `path`: a
    directory or hub name, or an HF config (random weights drawn from seed 0: benchmarks)."""
    if path is None:
        return None
    from transformers import AutoModelForCausalLM

    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    if isinstance(path, str):
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device)
    else:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)  # as tasks/training/backends/meta_load.py draws it for a distributed rank
            model = AutoModelForCausalLM.from_config(path, dtype=dtype).to(device)
    return model.requires_grad_(False).eval()


def build_optimizer(params, config: OptimizerConfig):
    """AdamW with linear warm-up to a constant rate: (optimizer, scheduler)."""
    optimizer = torch.optim.AdamW(
        params, lr=config.lr, betas=(config.beta1, config.beta2), weight_decay=config.weight_decay
    )
    warmup = config.warmup_steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda n: min(1.0, (n + 1) / warmup) if warmup else 1.0)
    return optimizer, scheduler
