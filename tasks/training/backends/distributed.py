"""The torch.distributed training backend: DDP or FSDP2 over the processes torchrun started on one node.

Rank 0 is the trainer: it generates, verifies, writes every file, talks to Prefect and owns the engine. Ranks > 0 hold a
copy (ddp) or a shard (fsdp2) of the policy and follow rank 0's requests (`serve`): build the policy, update it on a
batch, stream the weights to the engine (one gathered tensor at a time) or gather them all for a checkpoint, save or
load the optimizer, report memory, stop. Each request is one object broadcast on a gloo group whose timeout
(`command_timeout`) covers rank 0's generation between two updates; the collectives of a request run on the default
group, whose timeout (`collective_timeout`) bounds how long a lost rank can stall the others, with tensors on its
device, and a failure is told apart as out of memory, a lost rank or a bug (backends/collectives.py).

The update: every rank receives the step's whole batch and the update's settings, and trains on its share of each
mini-batch (`Sharding`, tasks/training/backends/sharding.py). A rank's policy and KL reference are built on the meta
device, sharded, and loaded from rank 0's one read of the weights (tasks/training/backends/meta_load.py).

Run: `rlep train --nproc 2 --strategy fsdp2` (torchrun, gloo on CPU, NCCL on GPU); ranks start in backends/launch.py.
"""

from __future__ import annotations

import gc
import json
import os
from collections import deque
from collections.abc import Callable, Iterator
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from rlep.tasks.settings.backend import BackendConfig
from rlep.tasks.training.backends.checkpoint import CheckpointError
from rlep.tasks.training.backends.collectives import GROUP as _GROUP
from rlep.tasks.training.backends.collectives import DistributedError, collective
from rlep.tasks.training.backends.fsdp import autocast_bf16, shard_fsdp2
from rlep.tasks.training.backends.memory import rank_memory, reset_peak
from rlep.tasks.training.backends.meta_load import build_on_meta_and_load
from rlep.tasks.training.backends.policy import PolicySpec, build_optimizer, checkpoint_activations
from rlep.tasks.training.backends.precision import PrecisionChoice
from rlep.tasks.training.backends.rng import process_rng_state, set_process_rng_state
from rlep.tasks.training.backends.sharded_checkpoint import SHARDED_FORMAT, load_sharded, save_sharded
from rlep.tasks.training.backends.sharding import Sharding
from rlep.tasks.training.generation.weight_sync import GatheredWeights, named_weights
from rlep.tasks.training.maths.batch import TrainingBatch
from rlep.tasks.training.maths.update import UpdateSettings, policy_update

# torchrun's variables: none may reach a vLLM engine (or the generator process), or it would try to join the
# trainer's process group. They are read once, when the group forms, then removed from this process.
TORCHRUN_VARIABLES = tuple(
    "RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK GROUP_WORLD_SIZE ROLE_RANK ROLE_NAME ROLE_WORLD_SIZE "
    "MASTER_ADDR MASTER_PORT TORCHELASTIC_RUN_ID TORCHELASTIC_RESTART_COUNT TORCHELASTIC_MAX_RESTARTS "
    "TORCHELASTIC_USE_AGENT_STORE TORCHELASTIC_ERROR_FILE TORCH_NCCL_ASYNC_ERROR_HANDLING".split()
)


def init_distributed(config: BackendConfig) -> int:
    """Join the process group torchrun described in the environment; returns this process's rank.

    The world size must be `config.nproc`. Afterwards torchrun's variables are gone from `os.environ`.
    """
    missing = [name for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if name not in os.environ]
    if missing:
        raise DistributedError(
            f"nproc {config.nproc}: {', '.join(missing)} not set; launch with `rlep train --nproc "
            f"{config.nproc}` (torchrun), not in one process"
        )
    world = int(os.environ["WORLD_SIZE"])
    if world != config.nproc:
        raise DistributedError(f"nproc {config.nproc} but the launcher ({config.launcher}) started {world} processes")
    _GROUP.local_rank = int(os.environ.get("LOCAL_RANK", os.environ["RANK"]))
    cuda = torch.cuda.is_available()
    if cuda:  # NCCL: the group's tensors live on this rank's GPU, which is also where all_gather_object puts them
        torch.cuda.set_device(_GROUP.local_rank)
    _GROUP.device = torch.device("cuda", _GROUP.local_rank) if cuda else torch.device("cpu")
    dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(seconds=config.collective_timeout))
    _GROUP.commands = dist.new_group(backend="gloo", timeout=timedelta(seconds=config.command_timeout))
    _GROUP.timeout, _GROUP.command_timeout = config.collective_timeout, config.command_timeout
    for name in TORCHRUN_VARIABLES:
        os.environ.pop(name, None)
    return dist.get_rank()


def shutdown() -> None:
    """Destroy the groups and free them now, while Python runs.

    A gloo group's worker thread drops its last finished work (and the tensors it holds) only when the group is
    freed; freed during interpreter exit instead, that thread needs the GIL for a tensor, is stopped inside a
    destructor, and the process aborts ("terminate called without an active exception", one exit in five on
    2 CPUs). Freeing a group joins its threads with the GIL released.
    """
    if dist.is_initialized():
        dist.destroy_process_group()
    _GROUP.commands = None
    gc.collect()  # a policy's cycles (FSDP2 hooks) may hold the default group


def _send(name: str, *payload: Any) -> None:
    with collective(f"request {name!r}", timeout=_GROUP.command_timeout):
        dist.broadcast_object_list([(name, payload)], src=0, group=_GROUP.commands)


def _receive() -> tuple[str, tuple]:
    box: list[Any] = [None]
    with collective("wait for rank 0's next request", timeout=_GROUP.command_timeout):
        dist.broadcast_object_list(box, src=0, group=_GROUP.commands)
    return box[0]


def _meet() -> None:
    """The ranks meet on the requests' group (`command_timeout`) before a build's first collective: each rank's set-up
    (transformers' modelling import took 5 s on a loaded 2-core CPU) is no collective's to bound."""
    with collective("building the policy", timeout=_GROUP.command_timeout):
        dist.barrier(group=_GROUP.commands)


# Requests a rank > 0 follows besides the backend's own: name -> handler(backend, *payload). Colocated generation
# registers its engine's (tasks/training/generation/colocated.py); a follower's engine is `backend.engine`.
FOLLOWER_REQUESTS: dict[str, Callable[..., None]] = {}


def _replicated(model: torch.nn.Module) -> None:
    """DDP's placement before the load: every rank holds the whole model (wrapped once loaded)."""


class DistributedBackend:
    """One rank's part of the policy: a full copy under DDP, a shard under FSDP2; its optimizer holds the same."""

    def __init__(self, spec: PolicySpec, precision: PrecisionChoice | None = None) -> None:
        from torch.nn.parallel import DistributedDataParallel

        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.device = _GROUP.device
        spec, resolved = spec.resolved(self.device)
        self.spec, self.precision = spec, precision or resolved  # rank 0 resolved `auto` before the others build
        self.sharding = Sharding(self.rank, self.world_size)
        fsdp2 = spec.backend.kind == "fsdp2"
        gathers = spec.backend.fsdp_param_dtype if fsdp2 else "float32"  # float32, or bf16 (backends/fsdp.py)
        shard = partial(shard_fsdp2, param_dtype=gathers) if fsdp2 else _replicated  # DDP wraps the loaded module
        # built on the meta device, sharded, loaded once from rank 0's read (tasks/training/backends/meta_load.py)
        self.module = build_on_meta_and_load(
            spec.weights, self.device, torch.float32, shard, spec.init_seed, before_load=_meet
        )
        checkpoint_activations(self.module, spec.backend)
        if spec.backend.precision == "bf16":  # one bf16 meaning for every strategy (tasks/training/backends/fsdp.py)
            autocast_bf16(self.module, self.device)
        if not fsdp2:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.model = DistributedDataParallel(self.module, device_ids=ids)
        else:
            self.model = self.module
        self.reference = None  # under FSDP2 1/N of the reference per rank too, in the compute dtype
        if spec.reference is not None:
            dtype = torch.bfloat16 if spec.backend.precision == "bf16" else torch.float32
            shard_reference = partial(shard_fsdp2, forward_only=True, param_dtype=gathers) if fsdp2 else _replicated
            reference = build_on_meta_and_load(spec.reference, self.device, dtype, shard_reference)
            self.reference = reference.requires_grad_(False)
        self.optimizer, self.scheduler = build_optimizer(self.model.parameters(), spec.optimizer)
        self.engine = None  # a rank > 0's own engine (colocated generation), fed by every weight sync

    @classmethod
    def lead(cls, spec: PolicySpec) -> DistributedBackend:
        """Rank 0: ask the other ranks to build their part of `spec`, then build its own."""
        if not dist.is_initialized():
            raise DistributedError(
                f"backend.nproc {spec.backend.nproc}: no process group; launch with `rlep train --nproc "
                f"{spec.backend.nproc}` (torchrun)"
            )
        if dist.get_rank() != 0:
            raise DistributedError("only rank 0 drives the training backend; the other ranks run serve()")
        spec, precision = spec.resolved(_GROUP.device)  # one precision for every rank: rank 0's device decides
        _send("build", spec)
        return cls(spec, precision)

    # ------------------------------------------------------------------ requests (rank 0 calls, every rank runs)

    def update(
        self,
        batch: TrainingBatch,
        settings: UpdateSettings,
        *,
        generator: torch.Generator | None = None,
        before_micro_batch: Callable[[], None] | None = None,
    ) -> dict[str, float]:
        """Every rank's share of `policy_update` on `batch`. The others receive the batch, the settings and the
        shuffle's state; `before_micro_batch` is rank 0's own (async core sharing)."""
        _send("update", batch, settings, None if generator is None else generator.get_state())
        return self._update(batch, settings, generator, before_micro_batch)

    def _update(
        self,
        batch: TrainingBatch,
        settings: UpdateSettings,
        generator: torch.Generator | None,
        before_micro_batch: Callable[[], None] | None = None,
    ) -> dict[str, float]:
        with collective("the policy update", settings.micro_batch_size):
            return policy_update(
                self.model,
                self.optimizer,
                self.scheduler,
                batch,
                settings,
                ref_model=self.reference,
                generator=generator,
                before_micro_batch=before_micro_batch,
                data_parallel=self.sharding,
            )

    def _follow_update(self, batch: TrainingBatch, settings: UpdateSettings, generator_state) -> None:
        generator = None
        if generator_state is not None:  # the same mini-batch shuffle as rank 0's
            generator = torch.Generator()
            generator.set_state(generator_state)
        self._update(batch, settings, generator)

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole policy under its HF names, on rank 0's CPU (empty on the other ranks)."""
        if self.rank == 0:
            _send("full_state_dict")
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        with collective("gathering the weights"):
            return get_model_state_dict(self.module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def named_weights(self, dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
        """The policy for the engine, one whole tensor at a time in `dtype` (FSDP2: each gathered when asked for, a
        `GatheredWeights` stream); every rank runs the gathers, rank 0 keeps the tensors, and a rank > 0 with an engine
        of its own (colocated) loads them into it. Lazy: the request goes out with the first tensor asked for."""
        stream = self._named_weights(dtype)
        return GatheredWeights(stream) if self.spec.backend.kind == "fsdp2" else stream

    def _named_weights(self, dtype: torch.dtype, request: str = "named_weights") -> Iterator[tuple[str, torch.Tensor]]:
        if self.rank == 0:  # `named_weights`: a sync, which a follower's own engine loads; `export_weights`: a save
            _send(request, dtype)
        with collective("streaming the weights"):
            yield from named_weights(self.module, dtype)

    def save_pretrained(self, directory, weight_dtype: torch.dtype = torch.float32) -> None:
        """Rank 0 writes the policy as a plain HF model (config, safetensors) for evaluation, collection and
        serving, in `weight_dtype` (the trainer passes its engine's: what a resumed run's engine then loads is
        what a weight sync would have sent it, so the resume stays exact). Gathered one tensor at a time and
        converted as it comes: rank 0 holds the model once in that dtype (half the float32 bytes in bf16), never
        the optimizer; the float32 masters a resume reads are in the shards `save_state` writes."""
        state = dict(self._named_weights(weight_dtype, "export_weights"))
        self.module.save_pretrained(directory, state_dict=state)
        if weight_dtype != torch.float32:  # transformers writes the live model's dtype (float32) into config.json
            config = Path(directory) / "config.json"
            dtype = str(weight_dtype).removeprefix("torch.")
            config.write_text(json.dumps({**json.loads(config.read_text()), "dtype": dtype}, indent=2) + "\n")

    def training_state(self) -> dict[str, Any]:
        """What rank 0 keeps in trainer_state.pt: the scheduler and how the run was sharded. The weights and the
        optimizer are each rank's shards, written by `save_state` (tasks/training/backends/sharded_checkpoint.py)."""
        return {
            "format": SHARDED_FORMAT,
            "scheduler": self.scheduler.state_dict(),
            "world_size": self.world_size,
            "strategy": self.spec.backend.kind,
        }

    def save_state(self, directory) -> None:
        """Every rank writes its shards of the float32 weights and the optimizer under `directory` (DCP)."""
        if self.rank == 0:
            _send("save_state", str(directory))
        with collective("writing the sharded checkpoint"):
            save_sharded(directory, self.model, self.optimizer)

    def load_training_state(self, state: dict[str, Any]) -> None:
        """Weights and optimizer from a sharded checkpoint (any world size: DCP reshards), or the optimizer from
        an older checkpoint's full state on rank 0."""
        if self.rank == 0:
            if state.get("format") != SHARDED_FORMAT and not isinstance(
                next(iter(state["optimizer"]["state"]), ""), str
            ):
                raise CheckpointError(
                    "this checkpoint was written by one training process (optimizer state indexed "
                    "by position); resume it with --nproc 1"
                )
            _send("load_training_state", {k: v for k, v in state.items() if k != "optimizer"})
        if state.get("format") == SHARDED_FORMAT:
            with collective("loading the sharded checkpoint"):
                load_sharded(state["sharded"], self.model, self.optimizer)
        else:  # written before sharded checkpoints: the full optimizer state, keyed by parameter name
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

            with collective("loading the optimizer state"):
                options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
                optimizer = state["optimizer"] if self.rank == 0 else {}
                set_optimizer_state_dict(self.model, self.optimizer, optimizer, options=options)
        self.scheduler.load_state_dict(state["scheduler"])

    def rng_state(self) -> dict[str, Any]:
        """Rank 0's random streams, and every rank's under `ranks` (restored at the same world size)."""
        if self.rank == 0:
            _send("rng_state")
        states: list[Any] = [None] * self.world_size
        with collective("gathering the random states"):
            dist.all_gather_object(states, process_rng_state())
        return {**states[0], "ranks": states}

    def load_rng_state(self, state: dict[str, Any]) -> None:
        if self.rank == 0:
            _send("load_rng_state", state)
        ranks = state.get("ranks")
        if ranks is not None and len(ranks) == self.world_size:
            set_process_rng_state(ranks[self.rank])
        elif self.rank == 0:  # another world size: rank 0's streams (prompt order, sampling) still resume exactly
            set_process_rng_state(state)

    def memory(self, reset: bool = False) -> list[dict[str, float]]:
        """Per rank: bytes of parameters, gradients, optimizer state and KL reference this rank holds, and its
        peak memory; `reset`: every rank's peak starts again afterwards (tasks/training/backends/memory.py)."""
        if self.rank == 0:
            _send("memory", reset)
        facts: list[Any] = [None] * self.world_size
        with collective("gathering memory facts"):
            dist.all_gather_object(facts, rank_memory(self.model, self.optimizer, self.device, self.reference))
        if reset:
            reset_peak(self.device)
        return facts

    def lr(self) -> float:
        return self.scheduler.get_last_lr()[0]

    def mean_entropies(self, *args, **kwargs) -> list[float]:  # TrainConfig refuses ExGRPO on several ranks first
        raise NotImplementedError(
            f"answer entropies on {self.world_size} ranks: not built (ExGRPO trains in one process)"
        )

    def replica_digests(self) -> list[str]:
        """Per rank, a digest of the full policy as that rank holds it (DDP: its replica; FSDP2: the gathered
        shards): all equal when the ranks agree."""
        import hashlib

        if self.rank == 0:
            _send("replica_digests")
        digest = hashlib.sha256()
        with collective("comparing replicas"):
            for name, value in self.module.state_dict().items():
                value = value.full_tensor() if hasattr(value, "full_tensor") else value
                digest.update(name.encode() + value.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
            digests: list[Any] = [None] * self.world_size
            dist.all_gather_object(digests, digest.hexdigest())
        return digests

    def close(self) -> None:
        """Rank 0: the other ranks drop this policy and wait for the next `build` (or `stop_serving`)."""
        if self.rank == 0:
            _send("release")

    def follow(self) -> str:
        """Ranks > 0: run rank 0's requests until it releases this policy (`release`) or stops serving without
        releasing it (`stop`: rank 0 failed before it could, e.g. its engine did not start); returns which."""
        handlers = {
            "update": self._follow_update,
            "full_state_dict": self.full_state_dict,
            "named_weights": lambda dtype: (self.engine.load_weights if self.engine else _drain)(
                self.named_weights(dtype)
            ),
            "export_weights": lambda dtype: _drain(self._named_weights(dtype)),
            "save_state": self.save_state,
            "load_training_state": self.load_training_state,
            "rng_state": self.rng_state,
            "load_rng_state": self.load_rng_state,
            "memory": self.memory,
            "replica_digests": self.replica_digests,
            **{name: partial(handler, self) for name, handler in FOLLOWER_REQUESTS.items()},
        }
        while True:
            name, payload = _receive()
            if name in ("release", "stop"):
                return name
            handlers[name](*payload)


def _drain(stream: Iterator[Any]) -> None:
    deque(stream, maxlen=0)


def serve() -> None:
    """Ranks > 0: build each policy rank 0 asks for and follow its requests, until rank 0 stops serving."""
    while True:
        name, payload = _receive()
        if name == "stop":
            return
        if name != "build":
            raise DistributedError(f"rank {dist.get_rank()}: expected rank 0's 'build' request, got {name!r}")
        backend = DistributedBackend(*payload)
        ended = backend.follow()
        del backend
        if ended == "stop":
            return


def stop_serving() -> None:
    """Rank 0, at the end: the other ranks return from `serve`."""
    _send("stop")
