"""`rlep pipeline`, `rlep study`: the plan of runs (collect, train each arm, evaluate, report), one seed or many."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlep.data.run_layout import PipelineLayout
from rlep.flows.commands.common import UserError, config_from_args
from rlep.flows.options import add_model_flags

# The settings of a study file that `rlep study` flags override: --seeds, --out, --runner
STUDY_FLAGS = {"seeds", "out", "runner.kind"}


def run_pipeline(args: argparse.Namespace) -> int:
    from rlep.tasks.collect import preflight, release_lock
    from rlep.tasks.pipeline import plan, run_pipeline
    from rlep.tasks.plan import check_plan_inputs
    from rlep.tasks.settings.pipeline import PipelineConfig

    config = config_from_args(PipelineConfig, args)
    check_plan_inputs(plan(config))  # before anything is written, and before Prefect starts (the flow checks again)
    store, _, _ = preflight(config.collect)  # user errors surface here, before anything runs
    release_lock(store.root)  # the collection itself may run in another process
    if args.prefect:
        from rlep.flows.pipeline import pipeline_flow

        report = pipeline_flow(config)
    else:
        report = run_pipeline(config).report  # each run in a fresh process of its own
    print(Path(report).read_text())
    print(f"report: {report}\nplot: {PipelineLayout(Path(report).parent).heldout_plot}")
    return 0


def add_study(sub) -> None:
    from rlep.tasks.settings.study import StudyConfig

    p = sub.add_parser(
        "study",
        help="Compare replay designs over seeds: arms x seeds, paired Student t intervals, the claims fixed in its "
        "config, compute charged in full (docs/study.md).",
    )
    p.set_defaults(handler=cmd_study)
    # the study's file: not a setting, and required (a study's claims and arms are written down before it runs)
    p.add_argument("--config", required=True, help="Study YAML (flows/configs/study-*.yaml).")
    p.add_argument(  # how this command runs the study, not a setting of the study
        "--prefect",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Run as a Prefect flow (needed for --runner ray); --no-prefect runs the runs one after another without "
        "Prefect, each in a fresh process.",
    )
    p.add_argument(  # what this command does, not a setting of the study
        "--report-only",
        action="store_true",
        help="Write the report of the training runs finished so far and run nothing: a look at a study that spans "
        "sessions (its claims are tested only once every run has finished).",
    )
    add_model_flags(p, StudyConfig, only=STUDY_FLAGS)


def cmd_study(args: argparse.Namespace) -> int:
    import shlex

    from rlep.tasks.plan import check_plan_inputs
    from rlep.tasks.study import StudyConfig, StudyError, plan, report_study

    config = config_from_args(StudyConfig, args)
    try:
        runs = plan(config)  # every arm's settings checked before anything runs
    except StudyError as err:
        raise UserError(f"{args.config}: invalid configuration: {err}") from None
    if not args.report_only:
        check_plan_inputs(runs)  # before anything is written, and before Prefect starts (the flow checks again)
    command = "rlep " + shlex.join(sys.argv[1:]) if sys.argv[1:2] == ["study"] else None
    if config.runner.kind == "ray" and not args.prefect and not args.report_only:
        raise UserError("--runner ray runs through Prefect's Ray task runner: drop --no-prefect")
    try:  # a study's own errors (a run directory written twice, an unreadable evaluation) name the file
        if args.report_only:
            report = report_study(config, command)["report"]
        elif args.prefect:
            from rlep.flows.study import study_flow

            report = study_flow(config, command)
        else:
            from rlep.tasks.study import run_study

            report = run_study(config, command=command)["report"]
    except StudyError as err:
        raise UserError(f"{args.config}: {err}") from None
    print(Path(report).read_text())
    return 0
