"""The settings of a collection (RLEP Phase I): which model answers which problems, how many answers each, with
which sampling, verifier and reward, which problems enter the pool, and where the run directory is.

Defaults follow RLEP (arXiv 2507.07451) where it gives one (temperature 0.7, min_correct 2), except 8 samples per
problem instead of 64, so a CPU collection takes minutes. The run itself is tasks/collect.py's.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from rlep.data.problem import DEFAULT_PROMPT_TEMPLATE, check_prompt_template
from rlep.data.prompting import CHAT_TEMPLATE_HELP, ChatTemplateMode
from rlep.data.run_layout import checkpoint_step
from rlep.tasks.settings.engine import EngineConfig, RolloutSampling, SamplingConfig, sampling_field
from rlep.tasks.settings.migrate import SavedSettings
from rlep.tasks.settings.paths import UserPath, UserPathOrName
from rlep.tasks.settings.perturb import stream_seed
from rlep.tasks.settings.prompt_length import PromptLengthConfig
from rlep.tasks.settings.reward import RewardConfig
from rlep.tasks.settings.source import ProblemSourceConfig, default_task
from rlep.tasks.settings.strict import SETTINGS
from rlep.tasks.settings.verifier import VerifierConfig


class CollectConfig(SavedSettings):
    """Collect verified answers into an experience pool (RLEP Phase I)."""

    model_config = SETTINGS

    model: UserPathOrName = Field(
        "tiny",
        min_length=1,
        description="Policy to sample from: HF-format directory (e.g. a checkpoint) or name; `tiny` = the project's "
        "tiny model.",
    )
    problems: ProblemSourceConfig = Field(
        default_factory=lambda: default_task("train", limit=200), description="Problems to collect answers for."
    )
    engine: EngineConfig = Field(default_factory=EngineConfig, description="Generation engine.")
    samples_per_prompt: int = Field(8, ge=1, le=4096, description="Answers sampled per problem (RLEP: 64).")
    sampling: RolloutSampling = sampling_field(
        RolloutSampling, "How answers are drawn (RLEP: temperature 0.7).", temperature=0.7, top_p=0.95, max_tokens=24
    )
    seed: int = Field(0, ge=0, description="Sampling seed (each shard derives its own from it).")
    min_correct: int = Field(
        2, ge=1, le=4096, description="A problem enters the pool with at least this many verified answers (RLEP: 2)."
    )
    prompt_length: PromptLengthConfig = Field(
        default_factory=PromptLengthConfig,
        description="Prompts with less than max_tokens of room in the engine's max_model_len.",
    )
    dedupe: bool = Field(
        False,
        description="Keep each distinct verified answer once per problem; off (RLEP's pool) keeps every verified "
        "answer, repeats included, so M replayed answers are drawn from all of them.",
    )
    shard_size: int = Field(
        64, ge=1, le=1_000_000, description="Problems per shard (the unit of progress and of resume)."
    )
    out: UserPath = Field(
        Path("runs/collect"), description="Run directory (trajectories/, pool.parquet, manifest.json)."
    )
    run_id: str | None = Field(None, description="Run id stored in every row; default: the out directory's name.")
    policy_version: int | None = Field(
        None,
        ge=0,
        description="Training step of the model's weights; default: N for a `step-N` checkpoint directory, else 0.",
    )
    prompt_template: str = Field(DEFAULT_PROMPT_TEMPLATE, description="Prompt with a `{problem}` placeholder.")
    chat_template: ChatTemplateMode = Field("auto", description=CHAT_TEMPLATE_HELP)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig, description="Answer checking.")
    reward: RewardConfig = Field(default_factory=RewardConfig, description="Reward from verdicts (stored per row).")

    @model_validator(mode="after")
    def _check(self) -> CollectConfig:
        if self.min_correct > self.samples_per_prompt:
            raise ValueError(
                f"min_correct ({self.min_correct}) > samples_per_prompt ({self.samples_per_prompt}): no problem could "
                f"enter the pool"
            )
        check_prompt_template(self.prompt_template)
        return self

    def resolved_run_id(self) -> str:
        return self.run_id or Path(self.out).resolve().name

    def resolved_policy_version(self) -> int:
        if self.policy_version is not None:
            return self.policy_version
        step = checkpoint_step(self.model)
        return 0 if step is None else step

    def request(self, shard: int) -> SamplingConfig:
        """The sampling request of shard number `shard`."""
        return SamplingConfig(
            **self.sampling.model_dump(), n=self.samples_per_prompt, seed=stream_seed(self.seed, shard)
        )
