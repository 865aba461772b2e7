"""Settings of a replay-training run (`rlep train`, `flows.train`). Defaults follow the RLEP recipe
(arXiv 2507.07451: PPO clip 0.2 / 0.28, token-mean loss, no KL) scaled down to the CPU tiny model."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from data.problem import DEFAULT_PROMPT_TEMPLATE
from data.sources import ProblemSourceConfig, default_task
from tasks.engines import EngineConfig
from tasks.replay.config import NoReplayConfig, ReplayConfig
from verifiers import RewardConfig, VerifierConfig


class LossConfig(BaseModel):
    """Policy-gradient loss and policy constraints."""

    model_config = ConfigDict(extra="forbid")

    objective: Literal["ppo-clip", "asymre"] = Field(
        "ppo-clip",
        description="`ppo-clip`: GRPO advantages with the clipped ratio (RLEP's recipe). `asymre`: Asymmetric REINFORCE "
        "(arXiv 2506.20520), advantage r - (group mean + asymre_delta_v), no ratio or clip (the FIFO paper's off-policy loss).",
    )
    asymre_delta_v: float = Field(
        -0.1, ge=-1, le=1, description="AsymRE: shift of the baseline V from the group's mean reward; below 0 favours positives."
    )
    clip_low: float = Field(0.2, ge=0, lt=1, description="PPO lower clip: ratio >= 1 - clip_low (RLEP: 0.2).")
    clip_high: float = Field(0.28, ge=0, le=10, description="PPO upper clip, 'clip-higher' from DAPO (RLEP: 0.28).")
    dual_clip: float | None = Field(
        10.0, gt=1, le=1000, description="Dual-clip constant c for negative advantages (Ye et al. 2020); null = off."
    )
    aggregation: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"] = Field(
        "token-mean", description="How token losses become one number (RLEP/DAPO: token-mean)."
    )
    kl_coef: float = Field(0.0, ge=0, le=100, description="Weight of KL to the frozen initial policy; 0 loads no reference model.")
    kl_estimator: Literal["k1", "k3"] = Field("k3", description="KL estimator (Schulman 2020).")
    is_correction: Literal["none", "truncate"] = Field(
        "none",
        description="Off-policy correction of replayed samples: `truncate` weights tokens by min(pi_old/mu, is_cap) "
        "against their stored behaviour log-probs. RLEP's paper uses none.",
    )
    is_cap: float = Field(2.0, ge=1, le=100, description="Cap of truncated importance weights.")
    overlong_buffer: int = Field(
        0, ge=0, le=1_000_000, description="DAPO soft overlong penalty: length band before max_tokens where reward falls to -overlong_factor; 0 = off."
    )
    overlong_factor: float = Field(1.0, ge=0, le=10, description="Largest overlong penalty.")
    scale_advantages_by_std: bool = Field(True, description="GRPO's division by the group std (off = Dr. GRPO).")
    token_mean_over: Literal["all", "fresh"] = Field(
        "all",
        description="token-mean only: divide the summed token losses by all tokens of the mini-batch, or by its fresh "
        "(non-replayed) tokens only. With `all`, replayed tokens enlarge the denominator, so a replay arm takes smaller "
        "steps on fresh data than the baseline at the same lr; `fresh` keeps the fresh step size equal.",
    )


class OptimizerConfig(BaseModel):
    """AdamW with linear warm-up, then a constant rate."""

    model_config = ConfigDict(extra="forbid")

    lr: float = Field(2e-4, gt=0, le=1, description="Peak learning rate (the tiny model's choice is explained in docs/training.md).")
    warmup_steps: int = Field(0, ge=0, le=1_000_000, description="Optimizer steps of linear warm-up.")
    weight_decay: float = Field(0.0, ge=0, le=1, description="AdamW decoupled weight decay.")
    beta1: float = Field(0.9, ge=0, lt=1, description="AdamW beta1.")
    beta2: float = Field(0.999, ge=0, lt=1, description="AdamW beta2.")
    grad_clip: float = Field(1.0, gt=0, le=1000, description="Clip the global gradient norm to this value.")


class TrainConfig(BaseModel):
    """Train a policy with GRPO and optional experience replay."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field("tiny", min_length=1, description="Starting policy: HF-format directory or name; `tiny` = the project's tiny model.")
    problems: ProblemSourceConfig = Field(
        default_factory=lambda: default_task("train", tiny_math_size=2000),
        description="Training prompts.",
    )
    eval_problems: ProblemSourceConfig = Field(
        default_factory=lambda: default_task("test", limit=200, tiny_math_size=500),
        description="Held-out problems for evaluation during training.",
    )
    replay: ReplayConfig = Field(default_factory=NoReplayConfig, description="Replay strategy and its knobs.")
    engine: EngineConfig = Field(default_factory=EngineConfig, description="Generation engine for rollouts and evaluation.")
    verifier: VerifierConfig = Field(default_factory=VerifierConfig, description="Answer checking.")
    reward: RewardConfig = Field(default_factory=RewardConfig, description="Reward from verdicts.")
    loss: LossConfig = Field(default_factory=LossConfig, description="Loss and policy constraints.")
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig, description="Optimizer.")

    steps: int = Field(40, ge=1, le=1_000_000, description="Training steps (each: generate, verify, replay, update, sync).")
    prompts_per_step: int = Field(32, ge=1, le=100_000, description="Prompts per step.")
    samples_per_prompt: int = Field(8, ge=2, le=4096, description="G: fresh answers per prompt (RLEP paper: 16).")
    temperature: float = Field(1.0, gt=0, le=10, description="Rollout sampling temperature.")
    top_p: float = Field(1.0, gt=0, le=1, description="Rollout nucleus sampling mass.")
    max_tokens: int = Field(24, ge=1, le=1_048_576, description="Most new tokens per rollout.")
    mode: Literal["sync", "async"] = Field(
        "sync",
        description="`sync`: each step generates its answers, then trains on them. `async`: a generator process samples "
        "the next steps' answers while this one trains (the FIFO replay paper's setting, arXiv 2604.08706), each at most "
        "`max_staleness` policy versions behind the one trained (docs/async.md).",
    )
    max_staleness: int = Field(
        1, ge=0, le=1000,
        description="async: most policy updates between the weights that generated a fresh answer and those that train on "
        "it; older answers are dropped and regenerated (counted in dropped_stale). 0 = no overlap.",
    )
    generator_gpus: list[int] = Field(
        default_factory=list,
        description="async on GPUs: the GPUs (numbered as this process sees them) of the generator process's engine; the "
        "update runs on the first GPU not listed. Empty: one device for both (on a GPU, lower engine.gpu_memory_utilization).",
    )
    ppo_epochs: int = Field(1, ge=1, le=100, description="Passes over each step's batch.")
    mini_batch_size: int | None = Field(
        64, ge=1, le=1_000_000,
        description="Sequences per optimizer step: a step's batch is split into mini-batches, one update each, all against "
        "the log-probs fixed before the first (so the clip acts from the second update on; RLEP: 512 prompts in mini-batches "
        "of 64 = 8 updates). null = the whole batch (one update per epoch, ratio 1, the clip never acts).",
    )
    micro_batch_size: int | None = Field(
        64, ge=1, le=1_000_000,
        description="Sequences per forward/backward pass; gradients are accumulated over the mini-batch, so the update is "
        "the same for any value (bounds activation memory; regular shapes are faster on a CPU). null = the whole mini-batch.",
    )
    eval_every: int = Field(10, ge=0, le=1_000_000, description="Evaluate every this many steps (and at 0 and the end); 0 = only at the end.")
    eval_samples: int = Field(1, ge=1, le=1024, description="K answers per held-out problem; 1 = greedy.")
    save_every: int = Field(20, ge=0, le=1_000_000, description="Checkpoint every this many steps (and at the end); 0 = only at the end.")
    keep_checkpoints: int = Field(2, ge=1, le=1000, description="Most recent checkpoints kept on disk.")
    seed: int = Field(0, ge=0, description="Seed of prompt order, sampling, replay draws and torch.")
    prompt_template: str = Field(DEFAULT_PROMPT_TEMPLATE, description="Prompt with a `{problem}` placeholder.")
    out: Path = Field(Path("runs/train"), description="Run directory (metrics, eval, checkpoints, fresh rollouts).")
    run_id: str | None = Field(None, description="Run id written into every rollout row; default: the out directory's name.")
    tracker: Literal["none", "tensorboard", "mlflow"] = Field(
        "none",
        description="Also write every step's metrics and each evaluation for a tracker (tasks/tracking.py): TensorBoard event "
        "files in OUT/tensorboard (`tensorboard --logdir OUT`), or a file-based MLflow store in OUT/mlruns (needs mlflow installed).",
    )

    @field_validator("tracker")
    @classmethod
    def _tracker_installed(cls, kind: str) -> str:
        from tasks.tracking import check_tracker

        check_tracker(kind)  # a missing package fails here, before anything runs
        return kind

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if "{problem}" not in self.prompt_template:
            raise ValueError("prompt_template must contain the `{problem}` placeholder")
        if self.generator_gpus:
            if self.mode != "async":
                raise ValueError(f"generator_gpus {self.generator_gpus}: applies to mode async only (mode is {self.mode!r})")
            if len(set(self.generator_gpus)) != len(self.generator_gpus) or min(self.generator_gpus) < 0:
                raise ValueError(f"generator_gpus {self.generator_gpus}: GPU numbers must be distinct and >= 0")
            if self.engine.tensor_parallel_size > len(self.generator_gpus):
                raise ValueError(f"engine.tensor_parallel_size ({self.engine.tensor_parallel_size}) > the generator's GPUs "
                                 f"({len(self.generator_gpus)}: {self.generator_gpus})")  # fmt: skip
        return self

    def resolved_run_id(self) -> str:
        """`run_id`, or the out directory's name (as for collection runs)."""
        return self.run_id or Path(self.out).resolve().name
