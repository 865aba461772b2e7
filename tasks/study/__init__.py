"""`rlep study`: replay designs compared arm against arm over several seeds, paired, with claims fixed beforehand.

- `config`: `StudyConfig` (base settings, arms as overrides, seeds, runner) and `plan()`, the runs and their order
  (every seed's from `tasks.plan.plan_experiment`, the pipeline's planner too); runs execute in `tasks.execute`;
- `runs`: gather the finished runs' results as tables, with the cost each arm is charged;
- `claims`: the study's record (its whole plan, claims and code version, with their digest) written as it starts
  (OUT/claims.json), a change refused once runs exist unless amended;
- `stats`: Student t intervals, paired differences, the claims of the configuration;
- `answer_check`: the reward-hack check of every run's pool, rollouts and final answers;
- `report`: study.parquet, summary.parquet, claims, the answer check, plots, report.md.

`run_study` runs a plan here, one run after another; `flows/study.py` runs it through Prefect, each run's
stages subflows of the study's flow run, the runs one after another or, when `runner.kind` is `ray`, as
Prefect tasks in parallel on Ray; both through the executor's one loop (`tasks.execute.execute_plan`), as
the pipeline does.
"""

from __future__ import annotations

from pathlib import Path

from rlep.tasks.execute import execute_in_process, execute_plan, execute_run, finished_record
from rlep.tasks.plan import Run
from rlep.tasks.study.answer_check import accepted_answers
from rlep.tasks.study.claims import fix_record
from rlep.tasks.study.config import StudyConfig, StudyError, plan, with_models_resolved
from rlep.tasks.study.report import write_study_outputs
from rlep.tasks.study.runs import gather

__all__ = [
    "Run",
    "accepted_answers",
    "StudyConfig",
    "StudyError",
    "execute_in_process",
    "execute_plan",
    "execute_run",
    "fix_record",
    "gather",
    "plan",
    "report_study",
    "run_study",
    "with_models_resolved",
    "write_study_outputs",
]


def run_study(config: StudyConfig, progress: bool = True, command: str | None = None) -> dict[str, Path]:
    """Record the plan (`fix_record`), run every run of the study one after another (each in a fresh process
    unless `runner.isolate` is off; finished runs are skipped), then write the outputs."""
    config = with_models_resolved(config, progress)
    runs = plan(config)
    fix_record(config, runs)  # before the first run: the plan and claims the report will test, with their digest
    execute = execute_in_process if config.runner.isolate else execute_run
    execute_plan(runs, lambda run, needs: execute(run, needs, progress=progress))
    study, final = gather(runs)
    return write_study_outputs(config, study, final, command, accepted_answers(runs))


def report_study(config: StudyConfig, command: str | None = None) -> dict[str, Path]:
    """The outputs of the training runs finished so far (each with the settings and starting weights of the plan),
    running nothing: a look at a study that spans sessions. Its claims are not tested until every training run has
    finished (report.md says how many have); the descriptive tables and the answer check are."""
    config = with_models_resolved(config, progress=False)
    runs = plan(config)
    arms = [run for run in runs if run.kind == "train" and run.arm is not None and not run.continues]
    hashes: dict[str, str | None] = {}  # the arms start from the same weights: each model is read once
    done = {run.key for run in arms if finished_record(run, hashes) is not None}
    if not done:
        raise StudyError(f"no arm's training run of the study in {config.out} has finished yet: nothing to report")
    reported = [run for run in runs if run.arm is None or run.key in done]  # their own runs and what they need
    study, final = gather(runs, only=done)
    interim = None if len(done) == len(arms) else ([run.key for run in arms if run.key in done], len(arms))
    if interim is None:  # the claims about to be tested are the recorded plan's (a change refused, as in run_study)
        fix_record(config, runs, running=False)
    return write_study_outputs(config, study, final, command, accepted_answers(reported), interim)
