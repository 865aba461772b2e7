"""Settings of the training backend, one model per kind: one process, or DDP or FSDP2 ranks (how many, how they
start), and the update's precision.

Kept free of torch so that the configuration can be read (CLI, Prefect forms) without it; the backends
themselves are in tasks/training/backends/backend.py and tasks/training/backends/distributed.py (docs/distributed.md).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, Field, TypeAdapter

from rlep.tasks.settings.migrate import upgrade_backend_settings
from rlep.tasks.settings.strict import SETTINGS

_KIND = {"cli_flag": "strategy"}


class _BackendSettings(BaseModel):
    """What every kind of backend has: the update's precision and whether it recomputes activations."""

    model_config = SETTINGS

    precision: Literal["auto", "fp32", "bf16"] = Field(
        "auto",
        description="`bf16`: forward and backward under bfloat16 autocast over float32 master weights, with float32 "
        "gradient reductions and optimizer state: one mechanism for one process, DDP and FSDP2 (LoRA's frozen base "
        "layers are held in bf16). Log-probs of the "
        "ratio move by up to ~6e-3 (docs/distributed.md). "
        "`auto`: bf16 where the update's device computes it natively (a GPU with native bf16; a CPU with AVX512-BF16 "
        "or AMX), float32 elsewhere, where emulated bf16 is several times slower; decided when training starts, "
        "logged and recorded in OUT/resolved_settings.json (tasks/training/backends/precision.py).",
    )
    activation_checkpointing: bool = Field(
        False,
        description="Recompute each decoder layer's activations in the backward pass: less memory, ~1/3 more compute.",
    )


class OneProcessBackend(_BackendSettings):
    """One training process without torch.distributed (the default)."""

    kind: Literal["one-process"] = Field(
        "one-process",
        description="How the update runs: `one-process` (the default), or over several ranks that keep a full copy "
        "each (`ddp`, gradients averaged) or shard weights, gradients and optimizer state (`fsdp2`). `--nproc N` "
        "(N > 1) alone means fsdp2.",
        json_schema_extra=_KIND,
    )

    @property
    def nproc(self) -> int:
        return 1


class _RanksBackend(_BackendSettings):
    """Ranks of torch.distributed, started by torchrun on this node or as Ray actors."""

    nproc: int = Field(
        ge=1,
        le=1024,
        description="Training processes (`launcher`: torchrun on this node, or Ray actors), one per GPU. Rank 0 "
        "generates, verifies, writes files and syncs the engine (in mode sync every rank generates with an engine of "
        "its own); every rank trains on its share of each mini-batch's groups. 1 (the default) is one process without "
        "torch.distributed whatever the strategy; N > 1 without `--strategy` is fsdp2. With `--strategy ddp|fsdp2` "
        "it must be given.",
    )
    launcher: Literal["torchrun", "ray"] = Field(
        "torchrun",
        description="How the ranks start. `torchrun`: processes on this node. `ray`: one Ray actor per rank, "
        "placed by a placement group on a local Ray or the cluster at `ray_address` (several nodes); the run directory "
        "must be on storage every node sees.",
    )
    ray_address: str | None = Field(
        None, description="launcher ray: cluster address (`auto`, `ray://host:10001`); none: start a local Ray."
    )
    cpus_per_rank: float = Field(1.0, gt=0, le=1024, description="launcher ray: CPUs of each rank (its threads too).")
    gpus_per_rank: Literal["auto"] | Annotated[float, Field(ge=0, le=64)] = Field(
        "auto",
        description="launcher ray: GPUs of each rank. `auto`: 1 when the Ray cluster reports GPUs, else 0 (CPU ranks, "
        "gloo). A number above 0 on a cluster without GPUs is refused when the run starts.",
    )
    ray_placement_timeout: float = Field(
        120.0, ge=1, le=86_400, description="launcher ray: seconds to wait for the cluster to place every rank."
    )
    collective_timeout: float = Field(
        300.0,
        ge=1,
        le=86_400,
        description="Seconds a collective of the update (gradient reduction, weight gathering) waits for a missing "
        "rank before the run stops with an error.",
    )
    command_timeout: float = Field(
        7200.0,
        ge=1,
        le=604_800,
        description="Seconds ranks > 0 wait for rank 0's next request; it covers rank 0's generation, verification and "
        "evaluation between two updates.",
    )


class DdpBackend(_RanksBackend):
    """DDP: every rank keeps a full copy of the weights and optimizer state; gradients are averaged."""

    kind: Literal["ddp"] = Field(
        "ddp", description=OneProcessBackend.model_fields["kind"].description, json_schema_extra=_KIND
    )


class Fsdp2Backend(_RanksBackend):
    """FSDP2: weights, gradients and optimizer state sharded over the ranks (torch `fully_shard` on each decoder
    layer, then the root), so parameter + optimizer memory per rank is ~1/nproc of one process."""

    kind: Literal["fsdp2"] = Field(
        "fsdp2", description=OneProcessBackend.model_fields["kind"].description, json_schema_extra=_KIND
    )
    fsdp_param_dtype: Literal["float32", "bfloat16"] = Field(
        "float32",
        description="strategy fsdp2: the dtype FSDP2 gathers each layer's weights in for its forward and "
        "backward (torch `MixedPrecisionPolicy(param_dtype=...)`). `bfloat16` halves the gathers' traffic and the "
        "gathered layer's memory, but the policy then computes in bf16 throughout, its residual stream too (not "
        "autocast's float32 one), so its log-probs drift from float32 (docs/distributed.md); master weights, gradient "
        "reductions and optimizer state stay float32, and the KL reference is gathered in the same dtype. `float32`: "
        "the weights' own dtype.",
    )


BackendSettings = OneProcessBackend | DdpBackend | Fsdp2Backend
# Where and how the policy update runs: one model per kind (a form per kind in the Prefect UI; `--strategy` is the
# flag of `kind`), which tasks/training/backends/registry.py builds and launches by. Settings without a `kind` (every
# run saved before kinds, `--nproc N` alone) are read through `upgrade_backend_settings` (change 4 of
# rlep.tasks.settings.migrate).
BackendConfig = Annotated[
    Annotated[BackendSettings, Field(discriminator="kind")], BeforeValidator(upgrade_backend_settings)
]
_BACKEND_ADAPTER: TypeAdapter[BackendSettings] = TypeAdapter(BackendConfig)


def backend_config(**settings: Any) -> BackendSettings:
    """The backend `settings` describe, in either layout: `backend_config(precision="fp32")` is one process,
    `backend_config(nproc=2, strategy="ddp")` and `backend_config(kind="ddp", nproc=2)` two DDP ranks."""
    return _BACKEND_ADAPTER.validate_python(settings)


class LoraConfig(BaseModel):
    """Low-rank adapters (LoRA, through peft) instead of training every weight: the base model stays frozen and
    each `target_modules` linear layer learns W + (alpha / rank) B A. The engine gets the merged weights."""

    model_config = SETTINGS

    rank: int = Field(
        16, ge=1, le=4096, description="LoRA rank r of each adapter.", json_schema_extra={"cli_flag": "lora-rank"}
    )
    alpha: float = Field(
        32.0,
        gt=0,
        le=1_000_000,
        description="LoRA alpha: the adapters' update is scaled by alpha / rank.",
        json_schema_extra={"cli_flag": "lora-alpha"},
    )
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        min_length=1,
        description="Names (last part) of the linear layers that get adapters; the default is every attention and "
        "MLP projection of a Llama/Qwen-style decoder.",
        json_schema_extra={"cli_flag": "lora-target-modules"},
    )
