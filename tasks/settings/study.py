"""A study's settings: arms x seeds on one base configuration, the claims fixed before it runs, its final
evaluation and where its runs execute. Its plan (the runs and what each waits for) is tasks/study/plan.py's.

An arm is a name plus overrides of the base training settings, merged by the rule `--config` and flags follow
(`rlep.tasks.settings.layering.merge_settings`). Every arm runs with every seed, and the seed is the training
seed: the same seed in two arms means the same prompt order and sampling seeds, so arms are compared paired by
seed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, Field, model_validator

from rlep.tasks.settings.collect import CollectConfig
from rlep.tasks.settings.engine import EngineConfig, EvalSampling, sampling_field
from rlep.tasks.settings.evaluate import EvalConfig, EvalProtocol
from rlep.tasks.settings.layering import merge_settings
from rlep.tasks.settings.paths import UserPath
from rlep.tasks.settings.runner import RunnerConfig
from rlep.tasks.settings.source import ProblemSourceConfig
from rlep.tasks.settings.strict import SETTINGS
from rlep.tasks.settings.train import TrainConfig

# The claim kinds named by an evaluation step (the rest by a target accuracy).
AT_A_STEP = ("accuracy_diff", "accuracy_at_equal_charge")


class ClaimConfig(BaseModel):
    """One claim of a study, fixed before it runs: which arm against which, on what metric, at which step or target.

    The claims table of the report measures exactly these (paired by seed, 95% Student t interval), so no figure
    in it is chosen after the curves are seen."""

    model_config = SETTINGS

    name: str = Field(..., min_length=1, description="Short name of the claim, e.g. `rlep-faster-early`.")
    arm: str = Field(..., min_length=1, description="The arm the claim is about.")
    against: str | None = Field(None, description="The arm it is compared with; default the study's baseline_arm.")
    kind: Literal["accuracy_diff", "steps_to_target", "charged_tokens_to_target", "accuracy_at_equal_charge"] = Field(
        ...,
        description="`accuracy_diff`: held-out accuracy at `step`, arm minus against (higher is better). "
        "`steps_to_target`: per seed, the first evaluation step with accuracy >= `target` (lower is better). "
        "`charged_tokens_to_target`: the same in generated tokens charged to the arm, the runs it depends on included. "
        "`accuracy_at_equal_charge`: per seed, the arm's latest evaluation charged at most the tokens the against arm "
        "was charged by its `step`, minus the against arm's accuracy at `step` (higher is better).",
    )
    step: int | None = Field(
        None,
        ge=0,
        description="accuracy_diff: the evaluation step the claim is about; accuracy_at_equal_charge: the against "
        "arm's evaluation step whose charged tokens are the budget.",
    )
    target: float | None = Field(None, gt=0, le=1, description="*_to_target: the held-out accuracy to reach.")

    @model_validator(mode="after")
    def _check(self) -> ClaimConfig:
        at_a_step = self.kind in AT_A_STEP
        if at_a_step and self.step is None:
            raise ValueError(f"claim {self.name!r}: {self.kind} needs `step`")
        if not at_a_step and self.target is None:
            raise ValueError(f"claim {self.name!r}: {self.kind} needs `target`")
        return self


class Amendment(BaseModel):
    """A change of a study's plan once its runs exist, made on purpose: it applies once, to the record whose digest
    it names, and the record and the report keep it with what it changed (`tasks.study.claims.fix_record`)."""

    model_config = SETTINGS

    of: str = Field(
        ...,
        min_length=8,
        pattern="^[0-9a-f]+$",
        description="The recorded digest this amends (its first 8 or more hex characters, as the refusal prints it).",
    )
    reason: str = Field(..., min_length=1, description="Why the plan changed after runs existed; the report prints it.")


class StudyEvalSampling(EvalSampling):
    """An evaluation's sampling whose answer length may be left to the run evaluated."""

    max_tokens: int | None = Field(None, ge=1, le=1_048_576, description="Most new tokens per answer; none: the run's.")


class StudyEvalConfig(EvalProtocol):
    """The final evaluation of every training run: what an evaluation measures (`EvalProtocol`, EvalConfig's
    base), as it differs here. K is 4, and the problems, engine and answer length are the run's unless set here;
    the rest of its EvalConfig is the run's too (model, seed, prompt, answer checking), so it measures what the
    run's own evaluations measured."""

    problems: ProblemSourceConfig | None = Field(None, description="Problems; none: the run's `eval_problems`.")
    engine: EngineConfig | None = Field(None, description="Generation engine; none: the run's.")
    samples: int = Field(4, ge=1, le=1024, description="K: answers sampled per problem (avg@K, pass@K, maj@K).")
    sampling: StudyEvalSampling = sampling_field(
        StudyEvalSampling, "How answers are drawn.", temperature=None, top_p=1.0, max_tokens=None
    )

    def for_run(self, train: TrainConfig, out: Path) -> EvalConfig:
        """The evaluation of `train`'s last checkpoint (its model is set when the run has finished)."""
        sampling = self.sampling.model_dump()
        if sampling["max_tokens"] is None:
            sampling["max_tokens"] = train.sampling.max_tokens
        return EvalConfig(
            model=train.model,
            problems=self.problems or train.eval_problems,
            engine=self.engine or train.engine,
            samples=self.samples,
            sampling=sampling,
            seed=train.seed,
            prompt_template=train.prompt_template,
            chat_template=train.chat_template,
            prompt_length=train.prompt_length,
            verifier=train.verifier,
            out=out,
        )


ARM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
# The runs a plan makes besides the arms' (their keys: `explore/seed-N`, `collect/seed-N`, `evaluate/base`): no
# arm may take these names.
EXPLORE_RUN, COLLECT_RUN, EVALUATE_RUN = "explore", "collect", "evaluate"
RESERVED_ARMS = (EXPLORE_RUN, COLLECT_RUN, EVALUATE_RUN)


class StudyConfig(BaseModel):
    """Compare replay designs: arms x seeds, paired by seed, Student t intervals, claims fixed before the run."""

    model_config = SETTINGS

    # What the study sets for each of its runs: every run's seed (from `seeds`) and directory (under `out`), and the
    # model a pool is collected from (each seed's exploration checkpoint). A value of its own there is not used, and
    # `rlep study` says so; `collect.model` follows `train.model`, the model the exploration starts from.
    SET_PER_RUN: ClassVar[frozenset[str]] = frozenset(
        {"collect.model", "collect.out", "collect.seed", "train.out", "train.seed"}
    )

    out: UserPath = Field(
        Path("runs/study"),
        description="Directory of the study: runs/, collect/, study.parquet, summary.parquet, report.md.",
    )
    seeds: list[Annotated[int, Field(ge=0)]] = Field(
        default_factory=lambda: [0, 1, 2], min_length=1, description="Training seeds; every arm runs each."
    )
    collect: CollectConfig = Field(
        default_factory=CollectConfig,
        description="Collection settings of RLEP's pools (model, seed and out are set per seed: the pool is "
        "collected from the seed's exploration checkpoint).",
    )
    train: TrainConfig = Field(
        default_factory=TrainConfig,
        description="Base training settings of every arm (seed and out are set per run; see `rlep show-config train`).",
    )
    evaluate: StudyEvalConfig = Field(
        default_factory=StudyEvalConfig,
        description="Final evaluation of every training run's last checkpoint (pass@k at the end).",
    )
    arms: dict[str, dict[str, Any]] = Field(
        default_factory=lambda: {"baseline": {"replay": {"kind": "none"}}, "rlep": {"replay": {"kind": "rlep"}}},
        min_length=1,
        description="Arm name -> overrides of the training settings.",
    )
    baseline_arm: str = Field("baseline", description="The reference arm of the paired differences.")
    explore_steps: int | None = Field(
        None, ge=1, description="Steps of RLEP's exploration run (default: the baseline's, so its run is reused)."
    )
    claims: list[ClaimConfig] = Field(
        default_factory=list,
        description="The claims the study tests, fixed before it runs; the report's claims table measures these only.",
    )
    equal_updates: bool = Field(
        True,
        description="Refuse arms that make different numbers of optimizer updates per step (mini-batches x epochs): "
        "more updates is more training, not a better design. Off only for a study whose question is the update "
        "count itself.",
    )
    runner: RunnerConfig = Field(default_factory=RunnerConfig, description="Where the runs execute.")
    finished_runs_keep: Literal["final", "all"] = Field(
        "final",
        description="What a finished training run of the study keeps of its checkpoints: `final`, its final one "
        "only (the earlier ones only served to resume it; with its AdamW state a SmolLM2-135M checkpoint is 1.6 GB, "
        "and `keep_checkpoints` 2 keeps two a run), or `all` that `keep_checkpoints` kept. Not part of the plan's "
        "digest.",
    )
    amendments: list[Amendment] = Field(
        default_factory=list,
        description="Changes of the recorded plan (seeds, arms' settings, evaluation, claims, code version) made "
        "after runs exist, each naming the digest it amends; without one such a change is refused. Not part of "
        "the plan's digest.",
    )

    def arm_settings(self, arm: str) -> dict[str, Any]:
        """Arm `arm`'s training settings as data: the study's `train` section with the arm's overrides merged in,
        not yet validated (`plan` validates them per run, with the run's seed and out)."""
        return merge_settings(self.train.model_dump(mode="json"), self.arms[arm], TrainConfig)

    @model_validator(mode="after")
    def _wire(self) -> StudyConfig:
        """`collect.model` left at its default follows `train.model`: a pool comes from a checkpoint of it."""
        if self.collect.model == CollectConfig.model_fields["model"].default:
            self.collect = self.collect.model_copy(update={"model": self.train.model})
        return self

    @model_validator(mode="after")
    def _check(self) -> StudyConfig:
        for arm in self.arms:  # an arm's name is a run key (`ARM/seed-N`) and a directory of the study
            if not ARM_NAME.fullmatch(arm):
                raise ValueError(
                    f"arms: {arm!r} cannot name an arm: it names the arm's directory (a letter or digit, then letters, "
                    "digits, '.', '_', '+' or '-')"
                )
            if arm in RESERVED_ARMS:
                raise ValueError(f"arms: {arm!r} is the name of the study's own {arm} runs: call the arm otherwise")
        if self.baseline_arm not in self.arms:
            raise ValueError(f"baseline_arm {self.baseline_arm!r} is not one of the arms {sorted(self.arms)}")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds repeat: {self.seeds}")
        for claim in self.claims:
            for arm in (claim.arm, claim.against):
                if arm is not None and arm not in self.arms:
                    raise ValueError(f"claims.{claim.name}: arm {arm!r} is not one of the arms {sorted(self.arms)}")
        names = [c.name for c in self.claims]
        if repeated := sorted({name for name in names if names.count(name) > 1}):
            raise ValueError(f"claims: names repeat: {', '.join(repeated)}")
        for claim in self.claims:
            if (claim.against or self.baseline_arm) == claim.arm:
                raise ValueError(f"claims.{claim.name}: compares arm {claim.arm!r} with itself")
        self._check_claim_steps()
        return self

    def _check_claim_steps(self) -> None:
        """An accuracy claim's step is one both its arms evaluate at (at equal charge, the against arm), checked
        here rather than in the report after every run."""
        for claim in self.claims:
            if claim.step is None:
                continue
            against = claim.against or self.baseline_arm
            # At equal charge the arm is read at whichever of its evaluations fits the budget: only the against
            # arm is read at `step`.
            for arm in (against,) if claim.kind == "accuracy_at_equal_charge" else (claim.arm, against):
                settings = self.arm_settings(arm)
                try:
                    steps, every = int(settings["steps"]), int(settings["eval_every"])
                except (TypeError, ValueError):
                    continue  # a bad value: `plan` names the arm and the field
                evaluated = evaluation_steps(steps, every)
                if claim.step not in evaluated:
                    shown = ", ".join(map(str, evaluated)) if len(evaluated) <= 12 else f"every {every} to {steps}"
                    raise ValueError(
                        f"claims.{claim.name}: step {claim.step} is not evaluated in arm {arm!r} "
                        f"(steps {steps}, eval_every {every}: {shown})"
                    )


def evaluation_steps(steps: int, eval_every: int) -> list[int]:
    """The steps a training run evaluates at (`Trainer.run`): 0 and every `eval_every` when it is set, and the
    last step."""
    regular = range(0, steps + 1, eval_every) if eval_every else []
    return sorted({*regular, steps})
