"""`rlep collect`, `rlep inspect`, `rlep pool export|import`: collecting verified answers and moving pools about."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rlep.flows.commands.common import UserError, config_from_args
from rlep.flows.options import add_model_flags, build_config, build_from_flags


def add_collect_flags(p: argparse.ArgumentParser) -> None:
    """`rlep collect`'s flags besides its settings': where the shards run (RunnerConfig's kind, address, max_parallel;
    not in the --config file, which is the collection's)."""
    from rlep.tasks.settings.runner import RunnerConfig

    add_model_flags(p, RunnerConfig, only={"kind", "address", "max_parallel"}, namespace="runner")


def run_collect(args: argparse.Namespace) -> int:
    from rlep.tasks.collect import CollectConfig, preflight
    from rlep.tasks.settings.runner import RunnerConfig

    config = config_from_args(CollectConfig, args)
    runner = build_from_flags(RunnerConfig, args, namespace="runner")
    if runner.kind == "ray" and not args.prefect:
        raise UserError("--runner ray runs shards through Prefect's Ray task runner: drop --no-prefect")
    if args.prefect:
        from rlep.flows.collect import collect_flow

        preflight(config)  # user errors surface here, before Prefect starts or anything is generated
        result = collect_flow(config, runner)
    else:  # the collection's own function, which preflights first itself
        from rlep.tasks.collect import run_collection
        from rlep.tasks.engines.cache import release_engines

        try:
            result = run_collection(config)
        finally:
            release_engines()
    pool, timings = result["pool"], result["timings"]
    print(f"run directory: {result['run_dir']} ({result['shards']} shards, {result['skipped_shards']} already done)")
    print(
        f"answers: {pool['samples']}, correct: {pool['correct']}, pool: {pool['pool_rows']} answers for "
        f"{pool['pool_problems']} problems (min_correct={pool['min_correct']})"
    )
    if result.get("left_out"):  # rows of the source not collected for (invalid_rows: skip, overlong_prompts: filter)
        print("left out: " + ", ".join(f"{reason} {count}" for reason, count in sorted(result["left_out"].items())))
    print("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()))
    print(f"inspect it with: rlep inspect {result['run_dir']}")
    return 0


def add_inspect(sub) -> None:
    from rlep.tasks.settings.inspect import InspectConfig

    p = sub.add_parser(
        "inspect",
        help="Summarise a collection run dir, a trajectories dir, a pool/trajectory Parquet file, or a pool store "
        "(its versions, then the latest pool).",
    )
    p.set_defaults(handler=cmd_inspect)
    add_model_flags(p, InspectConfig)


def cmd_inspect(args: argparse.Namespace) -> int:
    from rlep.data.inspect import render, summarize
    from rlep.data.pool import PoolStore, describe_versions
    from rlep.data.run_layout import POOL_FILE, CollectRunLayout
    from rlep.tasks.settings.inspect import InspectConfig

    config = build_from_flags(InspectConfig, args)
    path, store = config.path, PoolStore(config.path)
    if store.versions():  # a pool store: its versions, then the latest version's pool
        versions = describe_versions(path)
        if config.as_json:
            latest = summarize(store.latest() / POOL_FILE, sample_rows=config.rows)
            print(json.dumps({"versions": versions, "latest": latest}, indent=2))
            return 0
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"pool versions in {path}")
        for column in versions[0]:
            table.add_column(column)
        for row in versions:
            table.add_row(*(str(v) for v in row.values()))
        Console().print(table)
        path = str(store.latest() / POOL_FILE)
    elif (Path(path) / POOL_FILE).is_file() and not CollectRunLayout(path).trajectories.is_dir():
        path = str(Path(path) / POOL_FILE)  # a pool alone, e.g. `rlep pool import --out DIR`

    try:
        summary = summarize(path, sample_rows=config.rows)
    except (ValueError, OSError) as err:
        raise UserError(str(err)) from None
    if config.as_json:
        print(json.dumps(summary, indent=2))
    else:
        from rich.console import Console

        Console().print(render(summary))
    return 0


def add_pool(sub) -> None:
    from rlep.tasks.settings.pools import PoolExportConfig, PoolImportConfig

    pool = sub.add_parser("pool", help="Move experience pools between rlep and RLEP/verl.")
    pool_sub = pool.add_subparsers(dest="pool_command", required=True, metavar="ACTION")
    p = pool_sub.add_parser(
        "export", help="Write a pool in the RLEP/verl parquet layout (prompt chat list, reward_model.candidates)."
    )
    p.set_defaults(handler=cmd_pool_export)
    add_model_flags(p, PoolExportConfig)
    p = pool_sub.add_parser("import", help="Read an RLEP/verl pool file into rlep's trajectory schema.")
    p.set_defaults(handler=cmd_pool_import)
    add_model_flags(p, PoolImportConfig)


def cmd_pool_export(args: argparse.Namespace) -> int:
    from rlep.data.rlep_format import export_pool
    from rlep.tasks.settings.pools import PoolExportConfig

    config = build_from_flags(PoolExportConfig, args)
    try:
        options = config.model_dump(include={"into", "data_source", "prompt", "fields", "strict"})
        report = export_pool(config.pool, config.out, **options)
    except (ValueError, OSError) as err:
        raise UserError(str(err)) from None
    layout = {
        "into": f"merged into the rows of {report.source}",
        "source": f"the rows of {report.source}, their own fields kept",
        "rlep": "rlep's fields, extra_info.index numbered from 0",
    }[report.layout]
    print(
        f"wrote {report.path} (RLEP/verl layout, {layout}): {report.rows} rows, {report.candidates} answers on "
        f"{report.rows_with_candidates} of them; data_source {report.data_sources}"
    )
    if report.note:
        print(
            f"warning: the pool's problem fields are not kept ({report.note}); --into TRAINING_FILE writes the "
            "training file's own rows",
            file=sys.stderr,
        )
    if config.strict:
        print(
            f"strict re-check: dropped {report.strict_dropped} answers verl's boxed scorer would score 0, and "
            f"{report.strict_other_format} whose row's scorer reads another answer format"
        )
    if report.unmatched_pool_problems:
        print(
            f"warning: {report.unmatched_pool_problems} of {report.pool_problems} pool problems are not rows of "
            f"{config.into}",
            file=sys.stderr,
        )
    return 0


def cmd_pool_import(args: argparse.Namespace) -> int:
    from rlep.data.rlep_import import import_pool
    from rlep.tasks.settings.pools import PoolImportConfig

    config = build_from_flags(PoolImportConfig, args)
    try:
        problems = None
        if config.problems:
            from rlep.data.sources import load_problems
            from rlep.tasks.settings.source import ProblemSourceConfig

            source = build_config(ProblemSourceConfig, config.problems_config, {"source": config.problems})
            problems = load_problems(source)
        report = import_pool(config.path, config.out, run_id=config.run_id, problems=problems)
    except (ValueError, OSError) as err:
        raise UserError(str(err)) from None
    print(
        f"wrote {report.path} (rlep trajectory schema): {report.rows} answers to {report.problems} problems "
        f"({report.skipped_rows} rows without candidates skipped)"
    )
    if report.match_rate is not None:
        print(
            f"matched {report.matched_by_id + report.matched_by_text} of {report.problems} problems to "
            f"{config.problems} ({report.match_rate:.1%}: {report.matched_by_id} by extra_info.index, "
            f"{report.matched_by_text} by problem text; {report.gold_differs} with another gold answer)"
        )
    return 0
