"""The training backend: the one seam between the training step and the processes that update the policy.

The step asks a backend to `update` the policy on a batch (the maths stays in `tasks.training.update`), for
the `named_weights` the engine loads (HF names, streamed in the engine's dtype: tasks/training/weight_sync.py),
to `save_pretrained` the weights, for the optimizer's
`training_state` and the RNG streams of every process; it never learns how many processes there are.

- `LocalBackend`: one process, one device, no torch.distributed (the default).
- `DistributedBackend` (tasks/training/distributed.py): torch.distributed with `ddp` or `fsdp2`, launched by
  `rlep train --nproc N` (torchrun). Rank 0 runs the trainer and drives; ranks > 0 follow its requests.

`make_backend(spec)` picks one from `spec.backend.nproc`. A backend resolves `precision: auto` once, for its
device, when it is built (tasks/training/precision.py) and keeps the choice as `precision`.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np
import torch

from rlep.tasks.training.backend_config import BackendConfig
from rlep.tasks.training.batch import TrainingBatch
from rlep.tasks.training.checkpoint import CheckpointError
from rlep.tasks.training.collectives import named_out_of_memory
from rlep.tasks.training.config import OptimizerConfig
from rlep.tasks.training.fsdp import autocast_bf16
from rlep.tasks.training.precision import PrecisionChoice, resolve_precision
from rlep.tasks.training.sharded_checkpoint import SHARDED_FORMAT, load_sharded
from rlep.tasks.training.update import policy_update
from rlep.tasks.training.weight_sync import named_weights


@dataclass(frozen=True)
class PolicySpec:
    """What to train: all a rank needs to build its copy of the policy (rank 0 sends it to the others)."""

    weights: Any  # HF-format directory (or hub name) of the starting policy, or an HF config: random weights
    optimizer: OptimizerConfig
    backend: BackendConfig = field(default_factory=BackendConfig)
    reference: Any = None  # frozen reference for the KL term (like `weights`); None = no KL
    device: str = "cpu"  # one process's device; a distributed rank uses its own local GPU or the CPU
    init_seed: int = 0  # seeds the random weights of a policy given as a config (the same on every rank)

    @classmethod
    def of_run(cls, config, weights: str, base_model: str) -> PolicySpec:
        """A training run's policy (`config`: a TrainConfig): its weights, optimizer and backend, the starting model
        as KL reference when KL is on, on the CPU or the first GPU the generator does not use."""
        from rlep.tasks.training.async_gen import update_device

        device = update_device(config.generator_gpus, torch.cuda.device_count())
        reference = base_model if config.loss.kl_coef > 0 else None
        return cls(weights, config.optimizer, config.backend, reference, device)

    def resolved(self, device: str | torch.device) -> tuple[PolicySpec, PrecisionChoice]:
        """This spec with its precision made concrete for `device` (`auto`: bf16 where it is native), and why."""
        choice = resolve_precision(self.backend.precision, device)
        return replace(self, backend=self.backend.model_copy(update={"precision": choice.precision})), choice


class TrainingBackend(Protocol):
    rank: int
    world_size: int
    precision: PrecisionChoice  # the precision it trains in, and why (`auto` resolved for its device)

    def update(self, batch: TrainingBatch, *args: Any, **kwargs: Any) -> dict[str, float]: ...
    def named_weights(self, dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]: ...
    def full_state_dict(self) -> dict[str, torch.Tensor]: ...
    def save_pretrained(self, directory, **kwargs: Any) -> None: ...
    def training_state(self) -> dict[str, Any]: ...
    def save_state(self, directory) -> None: ...  # within a checkpoint being written: the backend's own files
    def load_training_state(self, state: dict[str, Any]) -> None: ...
    def rng_state(self) -> dict[str, Any]: ...
    def load_rng_state(self, state: dict[str, Any]) -> None: ...
    def lr(self) -> float: ...
    def close(self) -> None: ...


def make_backend(spec: PolicySpec) -> TrainingBackend:
    """One process (`nproc` 1) or rank 0 of a torch.distributed group already started by torchrun."""
    if spec.backend.nproc == 1:
        return LocalBackend(spec)
    from rlep.tasks.training.distributed import DistributedBackend

    return DistributedBackend.lead(spec)


def load_policy(weights: Any, device: torch.device, config: BackendConfig, init_seed: int = 0) -> torch.nn.Module:
    """The policy in float32 on `device` (master weights even under bf16), in eval mode. `weights`: a
    directory or hub name, or an HF config (random weights drawn on the CPU from `init_seed`: identical on
    every rank, nothing read from disk; benchmarks and tests)."""
    from transformers import AutoModelForCausalLM

    if isinstance(weights, str):
        model = AutoModelForCausalLM.from_pretrained(weights, dtype=torch.float32)
    else:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(init_seed)
            model = AutoModelForCausalLM.from_config(weights, dtype=torch.float32)
    return checkpoint_activations(model.to(device), config).eval()


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
            torch.manual_seed(0)  # as tasks/training/meta_load.py draws it for a distributed rank
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


def seed_process(seed: int) -> None:
    """Seed this process's random streams (python, numpy, torch)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def process_rng_state() -> dict[str, Any]:
    """This process's random streams (python, numpy, torch and, with GPUs, CUDA's: dropout draws from them)."""
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def set_process_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():  # restored per device present
        for device, rng in enumerate(state["cuda"][: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(rng, device)


class LocalBackend:
    """The policy, its optimizer and scheduler in this process, on one device."""

    rank = 0
    world_size = 1

    def __init__(self, spec: PolicySpec) -> None:
        self.device = torch.device(spec.device)
        self.spec, self.precision = spec.resolved(self.device)
        spec = self.spec
        self.model = load_policy(spec.weights, self.device, spec.backend, spec.init_seed)
        if spec.backend.precision == "bf16":
            autocast_bf16(self.model, self.device)
        self.reference = load_reference(spec.reference, self.device, spec.backend.precision)
        self.optimizer, self.scheduler = build_optimizer(self.model.parameters(), spec.optimizer)

    def update(self, batch: TrainingBatch, *args: Any, **kwargs: Any) -> dict[str, float]:
        """`policy_update` of this policy on `batch`; arguments after the batch are passed through. Out of memory
        is reported with the micro-batch size to lower (tasks/training/collectives.py)."""
        with named_out_of_memory("the policy update", kwargs.get("micro_batch_size")):
            return policy_update(
                self.model, self.optimizer, self.scheduler, batch, *args, ref_model=self.reference, **kwargs
            )

    def named_weights(self, dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
        """The policy's tensors one at a time in `dtype` (the parameters themselves where it is theirs)."""
        return named_weights(self.model, dtype)

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        return self.model.state_dict()

    def save_pretrained(self, directory, **kwargs: Any) -> None:
        self.model.save_pretrained(directory, **kwargs)

    def training_state(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}

    def save_state(self, directory) -> None:
        """Nothing: one process's optimizer travels whole in trainer_state.pt (`training_state`)."""

    def load_training_state(self, state: dict[str, Any]) -> None:
        if state.get("format") == SHARDED_FORMAT:  # a torch.distributed run's shards, read at world size 1
            load_sharded(state["sharded"], self.model, self.optimizer)
            self.scheduler.load_state_dict(state["scheduler"])
            return
        if "world_size" in state:  # a torch.distributed run's: its optimizer state is keyed by parameter name
            raise CheckpointError(
                f"this checkpoint was written by {state['world_size']} training processes "
                f"({state['strategy']}); resume it with --nproc {state['world_size']}"
            )
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])

    def rng_state(self) -> dict[str, Any]:
        return process_rng_state()

    def load_rng_state(self, state: dict[str, Any]) -> None:
        set_process_rng_state(state)

    def lr(self) -> float:
        return self.scheduler.get_last_lr()[0]

    def close(self) -> None:
        pass
