"""`rlep pipeline`, `rlep study`: the plan of runs (collect, train each arm, evaluate, report), one seed or many."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlep.data.run_layout import PipelineLayout
from rlep.flows.commands.common import UserError, config_from_args
from rlep.flows.options import build_config


def run_pipeline(args: argparse.Namespace) -> int:
    from rlep.tasks.collect import preflight, release_lock
    from rlep.tasks.pipeline import PipelineConfig, run_pipeline

    config = config_from_args(PipelineConfig, args)
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
    p = sub.add_parser(
        "study",
        help="Compare replay designs over seeds: arms x seeds, paired Student t intervals, the claims fixed in its "
        "config, compute charged in full (docs/study.md).",
    )
    p.set_defaults(handler=cmd_study)
    p.add_argument("--config", required=True, help="Study YAML (flows/configs/study-*.yaml).")
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="Seeds (overrides the file's).")
    p.add_argument("--out", default=None, help="Study directory (overrides the file's).")
    p.add_argument(
        "--runner", choices=["local", "ray"], default=None, help="Where runs execute (overrides runner.kind)."
    )
    p.add_argument(
        "--prefect",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Run as a Prefect flow (needed for --runner ray); --no-prefect runs the runs one after another without "
        "Prefect, each in a fresh process.",
    )


def cmd_study(args: argparse.Namespace) -> int:
    import shlex

    from rlep.tasks.study import StudyConfig, StudyError, plan

    overrides = {"seeds": args.seeds, "out": args.out, "runner.kind": args.runner}
    config = build_config(StudyConfig, Path(args.config), {k: v for k, v in overrides.items() if v is not None})
    try:
        plan(config)  # every arm's settings checked before anything runs
    except StudyError as err:
        raise UserError(f"{args.config}: invalid configuration: {err}") from None
    command = "rlep " + shlex.join(sys.argv[1:]) if sys.argv[1:2] == ["study"] else None
    if args.prefect:
        from rlep.flows.study import study_flow

        report = study_flow(config, command)
    elif config.runner.kind == "ray":
        raise UserError("--runner ray runs through Prefect's Ray task runner: drop --no-prefect")
    else:
        from rlep.tasks.study import run_study

        report = run_study(config, command=command)["report"]
    print(Path(report).read_text())
    return 0
