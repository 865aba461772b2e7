"""The training backend: the one seam between the training step and the processes that update the policy.

The step asks a backend to `update` the policy on a batch (the maths stays in `tasks.training.maths.update`), for the
`named_weights` the engine loads (HF names, streamed in the engine's dtype: tasks/training/generation/weight_sync.py),
to `save_pretrained` the weights, for the optimizer's `training_state` and the RNG streams of every process; it never
learns how many processes there are.

- `LocalBackend`: one process, one device, no torch.distributed (the default).
- `DistributedBackend` (tasks/training/backends/distributed.py): torch.distributed with `ddp` or `fsdp2`, launched by
  `rlep train --nproc N` (torchrun). Rank 0 runs the trainer and drives; ranks > 0 follow its requests.

`make_backend(spec)` builds the one `spec.backend` asks for, through the table of kinds that the launch reads too
(tasks/training/backends/registry.py). A backend resolves `precision: auto` once, for its device, when it is built
(tasks/training/backends/precision.py) and keeps the choice as `precision`. What both build, the policy, its KL
reference and optimizer from a `PolicySpec`, is in tasks/training/backends/policy.py; the random streams they save and
restore are in tasks/training/backends/rng.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

import torch

from rlep.tasks.training.backends.checkpoint import CheckpointError
from rlep.tasks.training.backends.collectives import named_out_of_memory
from rlep.tasks.training.backends.fsdp import autocast_bf16
from rlep.tasks.training.backends.lora import AdaptersOff, adapter_state, is_lora, load_adapter_state, merged_weights
from rlep.tasks.training.backends.policy import PolicySpec, build_optimizer, load_policy, load_reference
from rlep.tasks.training.backends.precision import PrecisionChoice
from rlep.tasks.training.backends.registry import kind_of
from rlep.tasks.training.backends.rng import process_rng_state, set_process_rng_state
from rlep.tasks.training.backends.sharded_checkpoint import SHARDED_FORMAT, load_sharded
from rlep.tasks.training.generation.weight_sync import named_weights
from rlep.tasks.training.maths.batch import TrainingBatch
from rlep.tasks.training.maths.logprobs import mean_completion_entropy
from rlep.tasks.training.maths.update import UpdateSettings, policy_update


class TrainingBackend(Protocol):
    rank: int
    world_size: int
    precision: PrecisionChoice  # the precision it trains in, and why (`auto` resolved for its device)

    def update(
        self,
        batch: TrainingBatch,
        settings: UpdateSettings,
        *,
        generator: torch.Generator | None = None,  # the mini-batches' shuffle (the run's, checkpointed with it)
        before_micro_batch: Callable[[], None] | None = None,  # rank 0's, before each forward (async core sharing)
    ) -> dict[str, float]: ...
    def named_weights(self, dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]: ...
    def full_state_dict(self) -> dict[str, torch.Tensor]: ...
    def save_pretrained(self, directory, weight_dtype: torch.dtype = torch.float32) -> None: ...
    def training_state(self) -> dict[str, Any]: ...
    def save_state(self, directory) -> None: ...  # within a checkpoint being written: the backend's own files
    def load_training_state(self, state: dict[str, Any]) -> None: ...
    def rng_state(self) -> dict[str, Any]: ...
    def load_rng_state(self, state: dict[str, Any]) -> None: ...
    def lr(self) -> float: ...
    def mean_entropies(
        self, prompt: list[int], answers: list[list[int]], pad_token_id: int, temperature: float, micro_batch: int
    ) -> list[float]: ...  # each answer's mean token entropy under the policy (what ExGRPO chooses by)
    def close(self) -> None: ...


def make_backend(spec: PolicySpec) -> TrainingBackend:
    """The backend of `spec`'s kind (tasks/training/backends/registry.py): one process (`nproc` 1), or rank 0 of a
    torch.distributed group already started by torchrun or Ray."""
    return kind_of(spec.backend).build(spec)


class LocalBackend:
    """The policy, its optimizer and scheduler in this process, on one device."""

    rank = 0
    world_size = 1

    def __init__(self, spec: PolicySpec) -> None:
        self.device = torch.device(spec.device)
        self.spec, self.precision = spec.resolved(self.device)
        spec = self.spec
        self.model = load_policy(spec.weights, self.device, spec.backend, spec.init_seed, spec.lora)
        if spec.backend.precision == "bf16":
            autocast_bf16(self.model, self.device)
        if spec.lora is not None and spec.reference is not None:
            self.reference = AdaptersOff(self.model)  # the frozen base is the starting policy: no second copy
        else:
            self.reference = load_reference(spec.reference, self.device, spec.backend.precision)
        trained = [p for p in self.model.parameters() if p.requires_grad]  # LoRA: the adapters only
        self.optimizer, self.scheduler = build_optimizer(trained, spec.optimizer)

    def update(
        self,
        batch: TrainingBatch,
        settings: UpdateSettings,
        *,
        generator: torch.Generator | None = None,
        before_micro_batch: Callable[[], None] | None = None,
    ) -> dict[str, float]:
        """`policy_update` of this policy on `batch`, against its KL reference. Out of memory is reported with the
        micro-batch size to lower (tasks/training/backends/collectives.py)."""
        with named_out_of_memory("the policy update", settings.micro_batch_size):
            return policy_update(
                self.model,
                self.optimizer,
                self.scheduler,
                batch,
                settings,
                ref_model=self.reference,
                generator=generator,
                before_micro_batch=before_micro_batch,
            )

    def named_weights(self, dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
        """The policy's tensors one at a time in `dtype` (the parameters themselves where it is theirs; LoRA: merged
        into the base's, under its HF names)."""
        if is_lora(self.model):
            return merged_weights(self.model, dtype)
        return named_weights(self.model, dtype)

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        return dict(merged_weights(self.model, torch.float32)) if is_lora(self.model) else self.model.state_dict()

    def save_pretrained(self, directory, weight_dtype: torch.dtype = torch.float32) -> None:
        """The float32 weights as a plain HF model, whatever `weight_dtype`: one process resumes from them (its
        optimizer state is in trainer_state.pt, its weights only here). LoRA: the merged model (the adapters
        themselves travel in trainer_state.pt)."""
        if is_lora(self.model):
            self.model.get_base_model().save_pretrained(directory, state_dict=self.full_state_dict())
        else:
            self.model.save_pretrained(directory)

    def training_state(self) -> dict[str, Any]:
        state = {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}
        return state | ({"lora": adapter_state(self.model)} if is_lora(self.model) else {})

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
        if is_lora(self.model) != ("lora" in state):
            raise CheckpointError(
                "this checkpoint was written with"
                + ("out" if "lora" not in state else "")
                + " LoRA adapters; resume it with the lora settings it was trained with"
            )
        if "lora" in state:
            load_adapter_state(self.model, state["lora"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])

    def rng_state(self) -> dict[str, Any]:
        return process_rng_state()

    def load_rng_state(self, state: dict[str, Any]) -> None:
        set_process_rng_state(state)

    def lr(self) -> float:
        return self.scheduler.get_last_lr()[0]

    def mean_entropies(
        self, prompt: list[int], answers: list[list[int]], pad_token_id: int, temperature: float, micro_batch: int
    ) -> list[float]:
        return mean_completion_entropy(self.model, prompt, answers, pad_token_id, temperature, micro_batch)

    def close(self) -> None:
        pass
