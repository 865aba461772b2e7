"""The commands of `rlep` (flows.cli holds the argument parser): each turns parsed arguments into
validated settings, runs the stage and prints what it did."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from rlep.data.run_layout import EvalRunLayout, PipelineLayout, TrainRunLayout
from rlep.flows.options import build_config, dump_yaml, flag_overrides


class UserError(Exception):
    """An error caused by the user's input: printed as one line, exit code 2."""


def _config_commands() -> dict[str, tuple[type, Callable]]:
    """Commands whose settings are one pydantic model: name -> (model, runner(args))."""
    from rlep.tasks.collect import CollectConfig
    from rlep.tasks.evaluate import EvalConfig
    from rlep.tasks.pipeline import PipelineConfig
    from rlep.tasks.training.config import TrainConfig

    return {
        "collect": (CollectConfig, _run_collect),
        "train": (TrainConfig, _run_train),
        "eval": (EvalConfig, _run_eval),
        "pipeline": (PipelineConfig, _run_pipeline),
    }


def _config(model: type, args: argparse.Namespace, base_file: Path | None = None, extra: dict | None = None):
    """The command's settings: `base_file` or --config, then flags, then `extra`, validated once."""
    overrides = {**flag_overrides(args), **(extra or {})}
    return build_config(model, base_file or args.config, overrides)


# ---------------------------------------------------------------- problems


def _cmd_problems(args: argparse.Namespace) -> int:
    from rlep.data.sources import ProblemSourceConfig, load_source, write_problems

    config = build_config(ProblemSourceConfig, args.config, flag_overrides(args))
    out = Path(args.out)
    if out.suffix.lower() not in (".jsonl", ".parquet"):
        raise UserError(f"--out {out}: must end in .jsonl or .parquet")
    loaded = load_source(config)  # the summary names the split applied and the rows skipped, per reason
    write_problems(loaded.problems, out)
    print(f"wrote {len(loaded.problems)} problems to {out} ({config.source}: {loaded.summary()})")
    return 0


# ---------------------------------------------------------------- tiny-model


def _cmd_tiny_model(args: argparse.Namespace) -> int:
    from rlep.data.tiny_model import TinyModelConfig, build_tiny_model, read_build_info

    config = build_config(TinyModelConfig, args.config, flag_overrides(args))
    out = build_tiny_model(
        Path(args.out) if args.out else None, config, force=args.force, progress=not args.quiet, threads=args.threads
    )
    info = read_build_info(out) or {}
    print(f"tiny model: {out}")
    if info:
        overall = (info.get("greedy_accuracy") or {}).get("overall", float("nan"))
        print(
            f"  build {info.get('build_seconds', float('nan')):.1f} s, greedy accuracy on tiny-math test: {overall:.3f}"
        )
        target, stop = info.get("target_cell"), info.get("stop") or {}
        if target:
            low, high = target["band"]
            print(
                f"  {target['cell']} (first {target['n']} test problems): {target['accuracy']:.3f}, band {low}-{high}; "
                f"stopped at step {stop.get('stopped_at_step')} ({stop.get('reason')})"
            )
            if not target["in_band"]:
                print(
                    f"  warning: {target['cell']} accuracy {target['accuracy']:.3f} is outside the band {low}-{high}",
                    file=sys.stderr,
                )
    return 0


# ---------------------------------------------------------------- real-model


def _cmd_real_model(args: argparse.Namespace) -> int:
    from rlep.tasks.real_model import ensure_real_model, read_info

    out = ensure_real_model(args.name, force=args.force, progress=not args.quiet)
    info = read_info(out) or {}
    print(f"{args.name}: {out}")
    print(
        f"  {info.get('architecture')}, {info.get('parameters', 0) / 1e6:.1f}M parameters, float32, from "
        f"{info.get('source')}"
    )
    print(f"  use it with --model {args.name} (e.g. rlep eval --model {args.name})")
    return 0


# ---------------------------------------------------------------- eval


def _run_eval(args: argparse.Namespace) -> int:
    from rlep.flows.evaluate import evaluate_flow
    from rlep.tasks.evaluate import EvalConfig

    config = _config(EvalConfig, args)

    result = evaluate_flow(config) if args.prefect else _eval_direct(config)
    _print_eval(result.rows, config)
    return 0


def _eval_direct(config):
    from rlep.tasks.evaluate import evaluate

    return evaluate(config, progress=True)


def _print_eval(rows: list[dict], config) -> None:
    from rich.console import Console
    from rich.table import Table

    print(f"model: {config.model}")
    table = Table(
        title=f"K={config.samples} answers per problem, {config.problems.source} split {config.problems.split}"
    )
    for column in ("data_source", "n_problems", "avg_at_k", "pass_at_k", "maj_at_k"):
        table.add_column(column, justify="left" if column == "data_source" else "right")
    for row in rows:
        table.add_row(
            row["data_source"],
            str(row["n_problems"]),
            *(f"{row[c]:.3f}" for c in ("avg_at_k", "pass_at_k", "maj_at_k")),
        )
    Console().print(table)
    if config.out:
        layout = EvalRunLayout(Path(config.out))
        print(f"wrote {layout.eval} and {layout.samples}")


# ---------------------------------------------------------------- collect, inspect, pool


def _run_collect(args: argparse.Namespace) -> int:
    from rlep.tasks.collect import CollectConfig, preflight, run_collection

    config = _config(CollectConfig, args)
    if args.runner == "ray" and not args.prefect:
        raise UserError("--runner ray runs shards through Prefect's Ray task runner: drop --no-prefect")
    preflight(config)  # user errors surface here, before Prefect starts or anything is generated
    if args.prefect:
        from rlep.flows.collect import collect_flow
        from rlep.tasks.runner import RunnerConfig

        runner = RunnerConfig(kind=args.runner, address=args.ray_address, max_parallel=args.max_parallel)
        result = collect_flow(config, runner)
    else:
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


def _cmd_inspect(args: argparse.Namespace) -> int:
    from rlep.data.inspect import render, summarize
    from rlep.data.pool import PoolStore, describe_versions
    from rlep.data.run_layout import POOL_FILE, CollectRunLayout

    store = PoolStore(args.path)
    if store.versions():  # a pool store: its versions, then the latest version's pool
        versions = describe_versions(args.path)
        if args.json:
            print(
                json.dumps(
                    {"versions": versions, "latest": summarize(store.latest() / POOL_FILE, sample_rows=args.rows)},
                    indent=2,
                )
            )
            return 0
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"pool versions in {args.path}")
        for column in versions[0]:
            table.add_column(column)
        for row in versions:
            table.add_row(*(str(v) for v in row.values()))
        Console().print(table)
        args.path = str(store.latest() / POOL_FILE)
    elif (Path(args.path) / POOL_FILE).is_file() and not CollectRunLayout(args.path).trajectories.is_dir():
        args.path = str(Path(args.path) / POOL_FILE)  # a pool alone, e.g. `rlep pool import --out DIR`

    try:
        summary = summarize(args.path, sample_rows=args.rows)
    except (ValueError, OSError) as err:
        raise UserError(str(err)) from None
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        from rich.console import Console

        Console().print(render(summary))
    return 0


def _cmd_pool_export(args: argparse.Namespace) -> int:
    from rlep.data.rlep_format import export_pool

    try:
        report = export_pool(
            args.pool,
            args.out,
            into=args.into,
            data_source=args.data_source,
            prompt=args.prompt,
            fields=args.fields,
            strict=args.strict,
        )
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
    if args.strict:
        print(
            f"strict re-check: dropped {report.strict_dropped} answers verl's boxed scorer would score 0, and "
            f"{report.strict_other_format} whose row's scorer reads another answer format"
        )
    if report.unmatched_pool_problems:
        print(
            f"warning: {report.unmatched_pool_problems} of {report.pool_problems} pool problems are not rows of "
            f"{args.into}",
            file=sys.stderr,
        )
    return 0


def _cmd_pool_import(args: argparse.Namespace) -> int:
    from rlep.data.rlep_format import import_pool

    try:
        problems = None
        if args.problems:
            from rlep.data.sources import ProblemSourceConfig, load_problems

            problems = load_problems(build_config(ProblemSourceConfig, args.problems_config, {"source": args.problems}))
        report = import_pool(args.path, args.out, run_id=args.run_id, problems=problems)
    except (ValueError, OSError) as err:
        raise UserError(str(err)) from None
    print(
        f"wrote {report.path} (rlep trajectory schema): {report.rows} answers to {report.problems} problems "
        f"({report.skipped_rows} rows without candidates skipped)"
    )
    if report.match_rate is not None:
        print(
            f"matched {report.matched_by_id + report.matched_by_text} of {report.problems} problems to {args.problems} "
            f"({report.match_rate:.1%}: {report.matched_by_id} by extra_info.index, {report.matched_by_text} by "
            f"problem text; "
            f"{report.gold_differs} with another gold answer)"
        )
    return 0


# ---------------------------------------------------------------- train


def _check_pool(config) -> None:
    """The replay design's inputs (RLEP's pool) must exist: a missing one fails here, before any model is loaded."""
    from rlep.tasks.replay import check_inputs

    check_inputs(config.replay)


def _run_train(args: argparse.Namespace) -> int:
    from rlep.tasks.training.config import TrainConfig

    if args.resume:
        saved = TrainRunLayout(args.resume).config
        if not saved.is_file():
            raise UserError(f"--resume {args.resume}: no {saved.name} there (not a training run directory)")
        config = _config(TrainConfig, args, base_file=saved, extra={"out": str(args.resume)})
    else:
        config = _config(TrainConfig, args)
    _check_pool(config)
    if args.prefect:
        from rlep.flows.train import train_flow

        result = train_flow(config, resume=bool(args.resume))
    else:
        from rlep.tasks.training.trainer import train

        result = train(config, resume=bool(args.resume))
    _print_train(result)
    return 0


def _print_train(result) -> None:
    import pyarrow.parquet as pq

    from rlep.data.metrics import ALL_SOURCES

    ev = pq.read_table(result.eval_path).to_pandas() if Path(result.eval_path).exists() else None
    if ev is not None and len(ev):
        overall = ev[ev.data_source == ALL_SOURCES].sort_values("step")
        first, last = overall.iloc[0], overall.iloc[-1]
        print(
            f"held-out avg@{int(last.k)}: step {int(first.step)} {first.avg_at_k:.3f} -> step {int(last.step)} "
            f"{last.avg_at_k:.3f}"
        )
    print(f"run directory: {result.out}\nfinal checkpoint: {result.final_checkpoint}")


# ---------------------------------------------------------------- pipeline


def _run_pipeline(args: argparse.Namespace) -> int:
    from rlep.tasks.collect import preflight, release_lock
    from rlep.tasks.pipeline import PipelineConfig, run_pipeline

    config = _config(PipelineConfig, args)
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


# ---------------------------------------------------------------- study


def _cmd_study(args: argparse.Namespace) -> int:
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


# ---------------------------------------------------------------- serve


def _cmd_serve(args: argparse.Namespace) -> int:
    from rlep.flows.deployments import DEFAULT_RECOLLECT_CRON, serve_deployments

    if not os.environ.get("PREFECT_API_URL"):
        print(
            "note: PREFECT_API_URL is not set; schedules and the UI need a Prefect server "
            "(`make ui` starts one on http://127.0.0.1:4200 and serves these deployments).",
            file=sys.stderr,
        )
    cron = None if args.no_schedule else (args.recollect_cron or DEFAULT_RECOLLECT_CRON)
    print(
        f"serving deployments collect, train, evaluate, pipeline, study, recollect (cron: {cron}); Ctrl-C stops",
        flush=True,
    )
    serve_deployments(recollect_cron=cron, train_dir=args.train_dir, pool_store=args.pool_store)
    return 0


def _cmd_ui(args: argparse.Namespace) -> int:
    from rlep.flows import server

    log = Path(args.home) / "server.log"
    Path(args.home).mkdir(parents=True, exist_ok=True)
    process = server.start_server(args.host, args.port, Path(args.home), log)
    try:
        server.wait_healthy(args.host, args.port, process=process)
        print(f"Prefect UI: http://{args.host}:{args.port}  (server log: {log})", flush=True)
        os.environ.update(server.server_env(args.host, args.port, Path(args.home)))
        return _cmd_serve(args)
    finally:
        server.stop(process)


# ---------------------------------------------------------------- bench


def _cmd_bench_async(args: argparse.Namespace) -> int:
    from rlep.tasks.bench.async_train import AsyncBenchConfig, run_async_bench

    config = _config(AsyncBenchConfig, args)
    from rlep.tasks.models import resolve_model

    resolve_model(config.train.model)  # a missing model fails here, before any run directory is made
    _check_pool(config.train)
    report = run_async_bench(config)
    print(json.dumps(report["summary"], indent=2))
    print(f"wrote {report['path']}")
    return 0


def _cmd_bench_fanout(args: argparse.Namespace) -> int:
    from rlep.tasks.bench.fanout import FanoutBenchConfig, run_fanout_bench

    report = run_fanout_bench(build_config(FanoutBenchConfig, args.config, flag_overrides(args)))
    print(json.dumps(report["summary"], indent=2))
    print(f"wrote {report['path']}")
    return 0


def _cmd_bench_generate(args: argparse.Namespace) -> int:
    from rlep.tasks.bench.generate import GenerateBenchConfig, run_generate_bench

    config = build_config(GenerateBenchConfig, args.config, flag_overrides(args))
    report = run_generate_bench(config)
    print(json.dumps(report["summary"], indent=2))
    print(f"wrote {report['path']}")
    return 0


def _cmd_bench_gpu(args: argparse.Namespace) -> int:
    from rlep.tasks.bench.gpu import check, config_from

    return check(config_from(args))


def _cmd_bench_train(args: argparse.Namespace) -> int:
    from rlep.tasks.bench.train import run_train_bench
    from rlep.tasks.collect import preflight, release_lock
    from rlep.tasks.pipeline import PipelineConfig

    config = _config(PipelineConfig, args)
    store, _, _ = preflight(config.collect)  # user errors surface here, before anything runs
    release_lock(store.root)  # the collection itself runs in another process
    report = run_train_bench(config, Path(args.results))
    print(json.dumps(report["summary"], indent=2))
    print(f"wrote {report['path']}")
    return 0


def _cmd_bench_verify(args: argparse.Namespace) -> int:
    from rlep.verifiers.bench import run_from_arguments

    run_from_arguments(args)
    return 0


def _cmd_bench_update(args: argparse.Namespace) -> int:
    from rlep.tasks.bench.update import bench_update, config_from, summary

    report = bench_update(config_from(args))
    print(summary(report))
    print(f"report: {report['config']['out']}")
    return 0


# ---------------------------------------------------------------- show-config


def show_config_names() -> list[str]:
    """Commands whose whole configuration `rlep show-config` prints: the one-model commands and the study."""
    return sorted([*_config_commands(), "study"])


def _cmd_show_config(args: argparse.Namespace) -> int:
    if args.command_name == "study":
        from rlep.tasks.study import StudyConfig as model
    else:
        model, _ = _config_commands()[args.command_name]
    print(dump_yaml(model()), end="")
    return 0
