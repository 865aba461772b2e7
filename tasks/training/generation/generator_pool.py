"""Generation on several engines at once (data-parallel): one generator process per engine, each with its own
GPUs (`tensor_parallel_size` of `generator_gpus` each) or its own share of the generator's cores.

`GeneratorPool` is a drop-in for one `GeneratorProcess` (`submit` / `receive` / `busy` / `push_weights` / `generate` /
`close`): a request's prompts are cut into contiguous, near-equal slices, slice i goes to engine i (sampling with its
own seed, `seed + SLICE_SEED_STRIDE * i`, so two engines never draw the same stream), and the answers are put back in
prompt order. The weights are read from the trainer once into one bucket buffer that every engine's process maps
(tasks/training/generation/weight_transport.py); each bucket is announced to all of them at once, they load it in
parallel, and the next is written once every one has acknowledged: a sync holds one bucket of host memory, not one per
engine, and takes about as long as the slowest engine's load, not their sum. Every engine handles one ordered stream, as
a single generator does, so all of them answer a request with the same policy version.

What changes with the count: a request sampled on k engines draws other random numbers than on one, so a run's
answers depend on `generator_engines` (a resume keeps them only at the same count).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlep.tasks.engines import Completion
from rlep.tasks.settings.engine import EngineConfig, SamplingConfig
from rlep.tasks.training.generation.async_gen import AnsweredLater, GeneratorProcess
from rlep.tasks.training.generation.weight_transport import bucket_for

SLICE_SEED_STRIDE = 1 << 40  # beyond generate_counts' per-count streams (2^31 apart) and any step's seed


def slices(count: int, parts: int) -> list[range]:
    """`range(count)` cut into `parts` contiguous slices whose sizes differ by at most one (larger first); empty
    slices when there are fewer items than parts."""
    size, extra = divmod(count, parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (i < extra)
        out.append(range(start, end))
        start = end
    return out


def engine_shares(
    engines: int, gpus: Sequence[int], tensor_parallel_size: int, cores: Sequence[int]
) -> list[tuple[list[int], list[int]]]:
    """(GPUs, cores) of each engine: `tensor_parallel_size` consecutive generator GPUs each, and the generator's
    cores cut into near-equal slices (engines share cores round-robin when there are fewer cores than engines)."""
    if gpus and len(gpus) != engines * tensor_parallel_size:
        raise ValueError(
            f"generator_gpus {list(gpus)}: {engines} engines x tensor_parallel_size {tensor_parallel_size} "
            f"need {engines * tensor_parallel_size} GPUs"
        )
    gpu_parts = [list(gpus[i * tensor_parallel_size : (i + 1) * tensor_parallel_size]) for i in range(engines)]
    if len(cores) >= engines:
        core_parts = [[cores[j] for j in part] for part in slices(len(cores), engines)]
    else:
        core_parts = [[cores[i % len(cores)]] if cores else [] for i in range(engines)]
    return list(zip(gpu_parts, core_parts))


class GeneratorPool(AnsweredLater):
    """Several generator processes behind one generator's interface (see the module's docstring)."""

    name = "generator-pool"

    def __init__(
        self,
        model: str | Path,
        config: EngineConfig,
        version: int,
        engines: int,
        cores: Sequence[int] = (),
        gpus: Sequence[int] = (),
    ) -> None:
        if engines < 1:
            raise ValueError(f"generator_engines {engines}: at least one")
        self.processes: list[GeneratorProcess] = []
        self.bucket_bytes = config.sync_bucket_mb << 20
        self.transport = bucket_for(gpus, self.bucket_bytes)  # one buffer, mapped by every engine's process
        try:
            for member_gpus, member_cores in engine_shares(engines, gpus, config.tensor_parallel_size, cores):
                member = GeneratorProcess(
                    model, config, version, cores=member_cores, gpus=member_gpus, bucket=self.transport
                )
                self.processes.append(member)
        except BaseException:
            self.close()
            raise
        self.weight_dtype = self.processes[0].weight_dtype
        self.pids = [m.pid for m in self.processes]
        self._sizes: dict[Any, list[int]] = {}  # tag -> prompts in each engine's slice

    def submit(self, tag: Any, prompts: Sequence[str], sampling: SamplingConfig) -> None:
        parts = slices(len(prompts), len(self.processes))
        self._sizes[tag] = [len(part) for part in parts]
        for i, (member, part) in enumerate(zip(self.processes, parts)):
            if part:
                seed = None if sampling.seed is None else sampling.seed + SLICE_SEED_STRIDE * i
                request = sampling if i == 0 else sampling.model_copy(update={"seed": seed})
                member.submit(tag, [prompts[j] for j in part], request)

    def receive(self, tag: Any) -> tuple[list[list[Completion]], int, float, float]:
        """(completions in prompt order, the policy version (the same on every engine), the busy seconds of the
        slowest engine, the idle seconds of the least idle one)."""
        completions: list[list[Completion]] = []
        versions, busy, idle = set(), [], []
        for member, size in zip(self.processes, self._sizes.pop(tag)):
            if size:
                part, version, member_busy, member_idle = member.receive(tag)
                completions += part
                versions.add(version)
                busy.append(member_busy)
                idle.append(member_idle)
        if len(versions) > 1:  # every engine got the same ordered stream: a second version is a bug
            raise RuntimeError(f"generator engines answered {tag} with different policy versions {sorted(versions)}")
        return completions, versions.pop(), max(busy), min(idle)

    def busy(self) -> bool:
        return any([member.busy() for member in self.processes])  # a list: every member reads what has arrived

    def close(self) -> None:
        """Stop every engine's process (each: an orderly stop, then a kill); never leaves one running. Then the
        shared bucket is released."""
        errors = []
        for member in self.processes:
            try:
                member.close()
            except BaseException as error:  # stop the others first
                errors.append(error)
        self.transport.close()
        if errors:
            raise errors[0]


def start_generator(
    model: str | Path, config: EngineConfig, version: int, engines: int, cores: Sequence[int], gpus: Sequence[int]
) -> GeneratorProcess | GeneratorPool:
    """The generator of an async run: one process for one engine, else a pool of `engines`."""
    if engines == 1:
        return GeneratorProcess(model, config, version=version, cores=cores, gpus=gpus)
    return GeneratorPool(model, config, version, engines, cores=cores, gpus=gpus)
