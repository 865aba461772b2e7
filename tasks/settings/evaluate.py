"""The settings of an evaluation: what it measures (`EvalProtocol`: on which problems, with which engine, how
many answers per problem and how they are drawn) and, for `rlep eval` and `flows.evaluate`, which model, prompt and
answer checking, and where the results go (`EvalConfig`). The evaluation itself is tasks/evaluate.py's."""

from __future__ import annotations

from pydantic import Field, model_validator

from rlep.data.problem import DEFAULT_PROMPT_TEMPLATE, check_prompt_template
from rlep.data.prompting import CHAT_TEMPLATE_HELP, ChatTemplateMode
from rlep.tasks.settings.engine import EngineConfig, EvalSampling, SamplingConfig, sampling_field
from rlep.tasks.settings.migrate import SavedSettings
from rlep.tasks.settings.paths import UserPath, UserPathOrName
from rlep.tasks.settings.prompt_length import PromptLengthConfig
from rlep.tasks.settings.source import ProblemSourceConfig, default_task
from rlep.tasks.settings.strict import SETTINGS
from rlep.tasks.settings.verifier import VerifierConfig


class EvalProtocol(SavedSettings):
    """What an evaluation measures, whichever model it evaluates: on which problems, with which engine, how many
    answers per problem and how they are drawn. EvalConfig adds the model, its seed, prompt and answer checking,
    and where the results go; a study's final evaluation (`tasks.settings.study.StudyEvalConfig`) states how its
    settings differ from these and takes the others from each training run it evaluates."""

    model_config = SETTINGS

    problems: ProblemSourceConfig = Field(
        default_factory=lambda: default_task("test", tiny_math_size=500),
        description="Which problems to evaluate on.",
    )
    engine: EngineConfig = Field(default_factory=EngineConfig, description="Generation engine.")
    samples: int = Field(1, ge=1, le=1024, description="K: answers sampled per problem (avg@K, pass@K, maj@K).")
    sampling: EvalSampling = sampling_field(
        EvalSampling, "How answers are drawn.", temperature=None, top_p=1.0, max_tokens=32
    )

    @model_validator(mode="after")
    def _k_answers_differ(self) -> EvalProtocol:
        if self.samples > 1 and self.sampling.temperature == 0:
            raise ValueError("samples > 1 with temperature 0 gives K identical answers: raise temperature")
        return self


class EvalConfig(EvalProtocol):
    """Evaluate one model on a problem split."""

    model: UserPathOrName = Field(
        "tiny",
        min_length=1,
        description="HF-format model directory or name; `tiny` = the project's tiny model (built when missing).",
    )
    seed: int = Field(0, ge=0, description="Sampling seed.")
    prompt_template: str = Field(
        DEFAULT_PROMPT_TEMPLATE,
        description="Prompt with a `{problem}` placeholder.",
        json_schema_extra={"cli_flag": "prompt-template"},
    )
    chat_template: ChatTemplateMode = Field(
        "auto", description=CHAT_TEMPLATE_HELP, json_schema_extra={"cli_flag": "chat-template"}
    )
    prompt_length: PromptLengthConfig = Field(
        default_factory=PromptLengthConfig,
        description="Prompts with less than max_tokens of room in the engine's max_model_len.",
    )
    verifier: VerifierConfig = Field(default_factory=VerifierConfig, description="Answer checking.")
    out: UserPath | None = Field(
        None, description="Directory for eval.parquet and eval_samples.parquet; none: print only."
    )

    @model_validator(mode="after")
    def _check(self) -> EvalConfig:
        check_prompt_template(self.prompt_template)
        return self

    def request(self) -> SamplingConfig:
        """The evaluation's sampling request; no temperature set: greedy (0) for K=1, 1.0 for K>1."""
        sampling = self.sampling.model_dump()
        if sampling["temperature"] is None:
            sampling["temperature"] = 0.0 if self.samples == 1 else 1.0
        return SamplingConfig(**sampling, n=self.samples, seed=self.seed)
