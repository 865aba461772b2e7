"""`rlep study`: replay designs compared arm against arm over several seeds, paired, with claims fixed beforehand.

- `config`: `StudyConfig` (base settings, arms as overrides, seeds, runner) and `plan()`, the runs and their order
  (every seed's from `tasks.plan.plan_experiment`, the pipeline's planner too); runs execute in `tasks.execute`;
- `runs`: gather the finished runs' results as tables, with the cost each arm is charged;
- `claims`: the study's record (its whole plan, claims and code version, with their digest) written as it starts
  (OUT/claims.json), a change refused once runs exist unless amended;
- `stats`: Student t intervals, paired differences, the claims of the configuration;
- `answer_check`: the reward-hack check of every run's pool, rollouts and final answers;
- `control`: whether each chance-control run was its baseline, step for step, until it re-seeded;
- `report`: study.parquet, summary.parquet, claims, the answer check, plots, report.md.

`run_study` is the study's one sequence (resolve the models, plan, record the plan, execute, gather, write):
here each run's actions are carried out by plain functions, one run after another; `flows/study.py` hands it
Prefect subflows as the carrier, or Prefect tasks on Ray in parallel when `runner.kind` is `ray` (the executor,
`tasks.execute`, decides each action either way), as `flows/pipeline.py` does `run_pipeline`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from rlep.data.run_layout import TrainRunLayout, checkpoint_step
from rlep.tasks.carry import Carrier, InFreshProcess, local_stages
from rlep.tasks.execute import execute_plan, execute_run
from rlep.tasks.plan import Run
from rlep.tasks.reuse import finished_record
from rlep.tasks.settings.study import StudyConfig
from rlep.tasks.study.answer_check import accepted_answers
from rlep.tasks.study.claims import fix_record
from rlep.tasks.study.plan import StudyError, plan, with_models_resolved
from rlep.tasks.study.report import write_study_outputs
from rlep.tasks.study.runs import gather

__all__ = [
    "Run",
    "accepted_answers",
    "StudyConfig",
    "StudyError",
    "fix_record",
    "gather",
    "keep_final_checkpoint",
    "plan",
    "report_study",
    "run_study",
    "with_models_resolved",
    "write_study_outputs",
]


def run_study(
    config: StudyConfig,
    progress: bool = True,
    command: str | None = None,
    carry_out: Carrier | None = None,
    parallel: bool = False,
) -> dict[str, Path]:
    """Record the plan (`fix_record`), carry out every run of the study (finished runs are skipped), then write
    the outputs. Each run's actions are carried out by `carry_out` (the study flow's: Prefect subflows, or tasks
    on Ray with `parallel`, each run started once the runs it needs have finished) or by plain functions, one run
    after another, each action in a fresh process unless `runner.isolate` is off."""
    config = with_models_resolved(config, progress)
    runs = plan(config)
    fix_record(config, runs)  # before the first run: the plan and claims the report will test, with their digest
    if carry_out is None:
        carry_out = InFreshProcess(progress) if config.runner.isolate else local_stages(progress)

    def execute(run: Run, needs: dict) -> dict:
        record = execute_run(run, needs, carry_out)
        if config.finished_runs_keep == "final":
            keep_final_checkpoint(record)
        return record

    execute_plan(runs, execute, parallel=parallel)
    study, final = gather(runs)
    return write_study_outputs(config, study, final, command, accepted_answers(runs))


def keep_final_checkpoint(record: dict) -> None:
    """Remove the checkpoints of a finished run (its `record`) older than its final one, which it keeps. Only older:
    a living-pool part's record names the end of its part even when the arm's run has gone past it since."""
    final = record.get("final_checkpoint")
    step = checkpoint_step(final) if final else None
    if step is None or not Path(final).is_dir():
        return
    for earlier, path in TrainRunLayout(Path(final).parent.parent).step_checkpoints():
        if earlier < step:
            shutil.rmtree(path, ignore_errors=True)


def report_study(config: StudyConfig, command: str | None = None) -> dict[str, Path]:
    """The outputs of the training runs finished so far (each with the settings and starting weights of the plan),
    running nothing: a look at a study that spans sessions. Its claims are not tested until every training run has
    finished (report.md says how many have); the descriptive tables and the answer check are."""
    config = with_models_resolved(config, progress=False)
    runs = plan(config)
    arms = [run for run in runs if run.kind == "train" and run.arm is not None and not run.continues]
    hashes: dict[str, str | None] = {}  # the arms start from the same weights: each model is read once
    # A run finished before an upgrade of rlep (a record of an earlier digest, the same training) is reported as
    # it is: going on with the study would only evaluate it again.
    done = {run.key for run in arms if finished_record(run, hashes, earlier_digest=True) is not None}
    if not done:
        raise StudyError(f"no arm's training run of the study in {config.out} has finished yet: nothing to report")
    reported = [run for run in runs if run.arm is None or run.key in done]  # their own runs and what they need
    study, final = gather(runs, only=done)
    interim = None if len(done) == len(arms) else ([run.key for run in arms if run.key in done], len(arms))
    if interim is None:  # the claims about to be tested are the recorded plan's (a change refused, as in run_study)
        fix_record(config, runs, running=False)
    return write_study_outputs(config, study, final, command, accepted_answers(reported), interim)
