"""`rlep`: the command line of the rlep pipeline.

Every command that runs a stage takes `--config FILE.yaml` plus one flag per setting (see `--help` of
the command); flags override the file. `rlep show-config COMMAND` prints a complete YAML to start from.
A user error (bad value, missing file or column) prints one message and exits with code 2, before
anything is written.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from flows.options import ConfigError, add_model_flags, build_config, dump_yaml, flag_overrides

EXIT_USAGE = 2

# Offline by default: no telemetry from Prefect, vLLM or the HF libraries.
for _name, _value in (
    ("DO_NOT_TRACK", "1"),
    ("PREFECT_SERVER_ANALYTICS_ENABLED", "false"),
    ("VLLM_NO_USAGE_STATS", "1"),
    ("HF_HUB_DISABLE_TELEMETRY", "1"),
    ("TOKENIZERS_PARALLELISM", "false"),
):
    os.environ.setdefault(_name, _value)


class UserError(Exception):
    """An error caused by the user's input: printed as one line, exit code 2."""


def _config_commands() -> dict[str, tuple[type, Callable]]:
    """Commands whose settings are one pydantic model: name -> (model, runner(args))."""
    from tasks.collect import CollectConfig
    from tasks.evaluate import EvalConfig
    from tasks.pipeline import PipelineConfig
    from tasks.training.config import TrainConfig

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
    from data.sources import ProblemSourceConfig, load_problems, write_problems

    config = build_config(ProblemSourceConfig, args.config, flag_overrides(args))
    out = Path(args.out)
    if out.suffix.lower() not in (".jsonl", ".parquet"):
        raise UserError(f"--out {out}: must end in .jsonl or .parquet")
    problems = load_problems(config)
    write_problems(problems, out)
    print(f"wrote {len(problems)} problems ({config.source}, split {config.split}) to {out}")
    return 0


# ---------------------------------------------------------------- tiny-model


def _cmd_tiny_model(args: argparse.Namespace) -> int:
    from data.tiny_model import TinyModelConfig, build_tiny_model, read_build_info

    config = build_config(TinyModelConfig, args.config, flag_overrides(args))
    out = build_tiny_model(Path(args.out) if args.out else None, config, force=args.force, progress=not args.quiet, threads=args.threads)
    info = read_build_info(out) or {}
    print(f"tiny model: {out}")
    if info:
        overall = (info.get("greedy_accuracy") or {}).get("overall", float("nan"))
        print(f"  build {info.get('build_seconds', float('nan')):.1f} s, greedy accuracy on tiny-math test: {overall:.3f}")
        target, stop = info.get("target_cell"), info.get("stop") or {}
        if target:
            low, high = target["band"]
            print(f"  {target['cell']} (first {target['n']} test problems): {target['accuracy']:.3f}, band {low}-{high}; "
                  f"stopped at step {stop.get('stopped_at_step')} ({stop.get('reason')})")  # fmt: skip
            if not target["in_band"]:
                print(f"  warning: {target['cell']} accuracy {target['accuracy']:.3f} is outside the band {low}-{high}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------- eval


def _run_eval(args: argparse.Namespace) -> int:
    from flows.evaluate import evaluate_flow
    from tasks.evaluate import EvalConfig

    config = _config(EvalConfig, args)

    result = evaluate_flow(config) if args.prefect else _eval_direct(config)
    _print_eval(result.rows, config)
    return 0


def _eval_direct(config):
    from tasks.evaluate import evaluate

    return evaluate(config, progress=True)


def _print_eval(rows: list[dict], config) -> None:
    from rich.console import Console
    from rich.table import Table

    print(f"model: {config.model}")
    table = Table(title=f"K={config.samples} answers per problem, {config.problems.source} split {config.problems.split}")
    for column in ("data_source", "n_problems", "avg_at_k", "pass_at_k", "maj_at_k"):
        table.add_column(column, justify="left" if column == "data_source" else "right")
    for row in rows:
        table.add_row(row["data_source"], str(row["n_problems"]), *(f"{row[c]:.3f}" for c in ("avg_at_k", "pass_at_k", "maj_at_k")))
    Console().print(table)
    if config.out:
        print(f"wrote {Path(config.out) / 'eval.parquet'} and {Path(config.out) / 'eval_samples.parquet'}")


# ---------------------------------------------------------------- collect, inspect, pool


def _run_collect(args: argparse.Namespace) -> int:
    from tasks.collect import CollectConfig, preflight, run_collection

    config = _config(CollectConfig, args)
    preflight(config)  # user errors surface here, before Prefect starts or anything is generated
    if args.prefect:
        from flows.collect import collect_flow

        result = collect_flow(config)
    else:
        from tasks.engines.cache import release_engines

        try:
            result = run_collection(config)
        finally:
            release_engines()
    pool, timings = result["pool"], result["timings"]
    print(f"run directory: {result['run_dir']} ({result['shards']} shards, {result['skipped_shards']} already done)")
    print(f"answers: {pool['samples']}, correct: {pool['correct']}, pool: {pool['pool_rows']} answers for "
          f"{pool['pool_problems']} problems (min_correct={pool['min_correct']})")  # fmt: skip
    print("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()))
    print(f"inspect it with: rlep inspect {result['run_dir']}")
    return 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    from data.inspect import render, summarize
    from data.pool import POOL_FILE, PoolStore, describe_versions

    store = PoolStore(args.path)
    if store.versions():  # a pool store: its versions, then the latest version's pool
        versions = describe_versions(args.path)
        if args.json:
            print(json.dumps({"versions": versions, "latest": summarize(store.latest() / POOL_FILE, sample_rows=args.rows)}, indent=2))
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
    from data.pool import export_pool

    try:
        path = export_pool(args.pool, args.out)
    except (ValueError, OSError) as err:
        raise UserError(str(err)) from None
    print(f"wrote {path} (RLEP/verl layout)")
    return 0


def _cmd_pool_import(args: argparse.Namespace) -> int:
    from data.pool import import_pool

    try:
        path = import_pool(args.path, args.out, run_id=args.run_id)
    except (ValueError, OSError) as err:
        raise UserError(str(err)) from None
    print(f"wrote {path} (rlep trajectory schema)")
    return 0


# ---------------------------------------------------------------- train


def _run_train(args: argparse.Namespace) -> int:
    from tasks.training.config import TrainConfig
    from tasks.training.trainer import CONFIG_FILE

    if args.resume:
        saved = Path(args.resume) / CONFIG_FILE
        if not saved.is_file():
            raise UserError(f"--resume {args.resume}: no {CONFIG_FILE} there (not a training run directory)")
        config = _config(TrainConfig, args, base_file=saved, extra={"out": str(args.resume)})
    else:
        config = _config(TrainConfig, args)
    if config.replay.kind == "rlep":
        from data.pool import resolve_pool_path

        resolve_pool_path(config.replay.pool)  # a missing pool fails here, before any model is loaded
    if args.prefect:
        from flows.train import train_flow

        result = train_flow(config, resume=bool(args.resume))
    else:
        from tasks.training.trainer import train

        result = train(config, resume=bool(args.resume))
    _print_train(result)
    return 0


def _print_train(result) -> None:
    import pyarrow.parquet as pq

    from data.metrics import ALL_SOURCES

    ev = pq.read_table(result.eval_path).to_pandas() if Path(result.eval_path).exists() else None
    if ev is not None and len(ev):
        overall = ev[ev.data_source == ALL_SOURCES].sort_values("step")
        first, last = overall.iloc[0], overall.iloc[-1]
        print(f"held-out avg@{int(last.k)}: step {int(first.step)} {first.avg_at_k:.3f} -> step {int(last.step)} {last.avg_at_k:.3f}")
    print(f"run directory: {result.out}\nfinal checkpoint: {result.final_checkpoint}")


# ---------------------------------------------------------------- pipeline


def _run_pipeline(args: argparse.Namespace) -> int:
    from tasks.collect import preflight
    from tasks.pipeline import PipelineConfig, local_stages, run_pipeline

    config = _config(PipelineConfig, args)
    preflight(config.collect)
    if args.prefect:
        from flows.pipeline import pipeline_flow

        report = pipeline_flow(config)
    else:
        report = run_pipeline(config, local_stages()).report
    print(Path(report).read_text())
    print(f"report: {report}\nplot: {Path(report).parent / 'heldout_accuracy.png'}")
    return 0


# ---------------------------------------------------------------- study


def _cmd_study(args: argparse.Namespace) -> int:
    import shlex

    import yaml
    from pydantic import ValidationError

    from tasks.study import StudyError, plan

    try:
        settings = yaml.safe_load(Path(args.config).read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise UserError(f"--config {args.config}: {err}") from None
    settings.update({k: v for k, v in {"seeds": args.seeds, "out": args.out}.items() if v is not None})
    if args.runner is not None:
        settings["runner"] = {**settings.get("runner", {}), "kind": args.runner}
    from tasks.study import StudyConfig

    try:
        config = StudyConfig.model_validate(settings)
        plan(config)  # every arm's settings checked before anything runs
    except ValidationError as err:
        raise UserError(f"{args.config}: " + "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())) from None
    except StudyError as err:
        raise UserError(f"{args.config}: {err}") from None
    command = "rlep " + shlex.join(sys.argv[1:]) if sys.argv[1:2] == ["study"] else None
    if args.prefect:
        from flows.study import study_flow

        report = study_flow(config, command)
    elif config.runner.kind == "ray":
        raise UserError("--runner ray runs through Prefect's Ray task runner: drop --no-prefect")
    else:
        from tasks.study import run_study

        report = run_study(config, command=command)["report"]
    print(Path(report).read_text())
    return 0


# ---------------------------------------------------------------- serve


def _cmd_serve(args: argparse.Namespace) -> int:
    from flows.deployments import serve_deployments

    if not os.environ.get("PREFECT_API_URL"):
        print("note: PREFECT_API_URL is not set; schedules and the UI need a Prefect server "
              "(`make ui` starts one on http://127.0.0.1:4200 and serves these deployments).", file=sys.stderr)  # fmt: skip
    cron = None if args.no_schedule else args.recollect_cron
    print(f"serving deployments collect, train, evaluate, pipeline, study, recollect (cron: {cron}); Ctrl-C stops", flush=True)
    serve_deployments(recollect_cron=cron, train_dir=args.train_dir, pool_store=args.pool_store)
    return 0


def _cmd_ui(args: argparse.Namespace) -> int:
    from flows import server

    log = Path(args.home) / "server.log"
    Path(args.home).mkdir(parents=True, exist_ok=True)
    process = server.start_server(args.host, args.port, Path(args.home), log)
    try:
        server.wait_healthy(args.host, args.port, process=process)
        print(f"Prefect UI: http://{args.host}:{args.port}  (server log: {log})", flush=True)
        os.environ.update(server.server_env(args.host, args.port, Path(args.home)))
        args.no_schedule = False
        return _cmd_serve(args)
    finally:
        server.stop(process)


# ---------------------------------------------------------------- bench


def _cmd_bench_generate(args: argparse.Namespace) -> int:
    from tasks.bench_generate import GenerateBenchConfig, run_generate_bench

    config = build_config(GenerateBenchConfig, args.config, flag_overrides(args))
    report = run_generate_bench(config)
    print(json.dumps(report["summary"], indent=2))
    print(f"wrote {report['path']}")
    return 0


def _cmd_bench_train(args: argparse.Namespace) -> int:
    from tasks.bench_train import run_train_bench
    from tasks.collect import preflight
    from tasks.pipeline import PipelineConfig

    config = _config(PipelineConfig, args)
    preflight(config.collect)
    report = run_train_bench(config, Path(args.results))
    print(json.dumps(report["summary"], indent=2))
    print(f"wrote {report['path']}")
    return 0


def _cmd_bench_verify(args: argparse.Namespace) -> int:
    from verifiers.bench import run_from_arguments

    run_from_arguments(args)
    return 0


# ---------------------------------------------------------------- show-config


def _cmd_show_config(args: argparse.Namespace) -> int:
    model, _ = _config_commands()[args.command_name]
    print(dump_yaml(model()), end="")
    return 0


# ---------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    from data.sources import ProblemSourceConfig
    from data.tiny_model import TinyModelConfig
    from tasks.bench_generate import GenerateBenchConfig

    parser = argparse.ArgumentParser(
        prog="rlep",
        description="RL for LLM reasoning with experience replay: collect verified answers, replay them in GRPO.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="Show library output (vLLM, torch, Prefect) on the terminal; otherwise a run keeps it in RUN_DIR/rlep.log.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_text: str, handler: Callable) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(handler=handler)
        p.add_argument("--config", type=Path, default=None, help="YAML file of settings; flags override it.")
        return p

    p = command("problems", "Write problems of a source (default: built-in tiny-math) to JSONL or Parquet.", _cmd_problems)
    p.add_argument("--out", required=True, help="Output file, .jsonl or .parquet.")
    add_model_flags(p, ProblemSourceConfig)

    p = command("tiny-model", "Build (or find cached) the tiny default model: tokenizer, Qwen2 LM, supervised training.", _cmd_tiny_model)
    p.add_argument("--out", default=None, help="Directory for the model (default: the cache, see README).")
    p.add_argument("--force", action="store_true", help="Rebuild even if a complete build is there.")
    p.add_argument("--quiet", action="store_true", help="No progress bar.")
    p.add_argument("--threads", type=int, default=1, help="torch threads for the build [default: 1; see docs/tiny_model.md].")
    add_model_flags(p, TinyModelConfig)

    for name, (model, runner) in _config_commands().items():
        doc = (model.__doc__ or "").strip().splitlines()[0]
        p = command(name, doc, runner)
        p.add_argument("--prefect", action=argparse.BooleanOptionalAction, default=True,
                       help="Run as a Prefect flow (artifacts, UI); --no-prefect calls the functions directly.")
        if name == "train":
            p.add_argument("--resume", type=Path, default=None, metavar="OUT",
                           help="Continue the run in OUT from its last checkpoint (its saved settings; flags override).")
        add_model_flags(p, model)

    p = sub.add_parser("inspect", help="Summarise a collection run dir, a trajectories dir, or a pool/trajectory Parquet file.")
    p.set_defaults(handler=_cmd_inspect)
    p.add_argument("path", help="Run directory, trajectories directory, or .parquet file.")
    p.add_argument("--json", action="store_true", help="Print the summary as JSON.")
    p.add_argument("--rows", type=int, default=3, help="Sample rows to show [default: 3].")

    pool = sub.add_parser("pool", help="Move experience pools between rlep and RLEP/verl.")
    pool_sub = pool.add_subparsers(dest="pool_command", required=True, metavar="ACTION")
    p = pool_sub.add_parser("export", help="Write a pool in the RLEP/verl parquet layout (prompt chat list, reward_model.candidates).")
    p.set_defaults(handler=_cmd_pool_export)
    p.add_argument("pool", help="A pool as `rlep train --pool` takes it: pool.parquet, a collection run or pool version directory, or a pool store (its latest version).")
    p.add_argument("--format", choices=["rlep"], default="rlep", help="Target layout [default: rlep].")
    p.add_argument("--out", required=True, help="Output .parquet file.")
    p = pool_sub.add_parser("import", help="Read an RLEP/verl pool file into rlep's trajectory schema.")
    p.set_defaults(handler=_cmd_pool_import)
    p.add_argument("path", help="RLEP/verl .parquet file with reward_model.candidates.")
    p.add_argument("--out", required=True, help="Output .parquet file, or a directory to hold pool.parquet (rlep schema; usable as --pool).")
    p.add_argument("--run-id", default="imported", help="run_id of the imported rows [default: imported].")

    p = sub.add_parser("serve", help="Register the deployments (collect, train, evaluate, pipeline, scheduled recollect) and run them.")
    p.set_defaults(handler=_cmd_serve)
    p.add_argument("--recollect-cron", default="0 3 * * *", help="Cron schedule of the recollect deployment [default: daily 03:00].")
    p.add_argument("--no-schedule", action="store_true", help="Register recollect without a schedule.")
    p.add_argument("--train-dir", type=Path, default=None, help="Training run whose latest checkpoint recollect samples.")
    p.add_argument("--pool-store", type=Path, default=Path("runs/pools"), help="Versioned pool store [default: runs/pools].")

    p = sub.add_parser("ui", help="Start a local Prefect server (UI on 127.0.0.1) and serve the deployments; Ctrl-C stops both.")
    p.set_defaults(handler=_cmd_ui)
    p.add_argument("--host", default="127.0.0.1", help="Address to listen on [default: 127.0.0.1].")
    p.add_argument("--port", type=int, default=4200, help="Port of the UI and API [default: 4200].")
    p.add_argument("--home", default=".prefect", help="PREFECT_HOME for the server's database [default: .prefect].")
    p.add_argument("--recollect-cron", default="0 3 * * *", help="Cron schedule of the recollect deployment.")
    p.add_argument("--train-dir", type=Path, default=None, help="Training run whose latest checkpoint recollect samples.")
    p.add_argument("--pool-store", type=Path, default=Path("runs/pools"), help="Versioned pool store [default: runs/pools].")

    bench = sub.add_parser("bench", help="Benchmarks; results go to bench/results/*.json.")
    bench_sub = bench.add_subparsers(dest="bench", required=True, metavar="BENCH")
    p = bench_sub.add_parser("generate", help="Tokens/s of the vLLM and transformers engines on the same model and prompts.")
    p.set_defaults(handler=_cmd_bench_generate)
    p.add_argument("--config", type=Path, default=None, help="YAML file of settings; flags override it.")
    add_model_flags(p, GenerateBenchConfig)
    p = bench_sub.add_parser("train", help="Held-out accuracy before/after, step time split and replay overhead: replay arm vs baseline.")
    p.set_defaults(handler=_cmd_bench_train)
    p.add_argument("--config", type=Path, default=None, help="Pipeline YAML (e.g. flows/configs/demo.yaml); flags override it.")
    p.add_argument("--results", default="bench/results", help="Directory for the JSON result [default: bench/results].")
    from tasks.pipeline import PipelineConfig

    add_model_flags(p, PipelineConfig)
    p = bench_sub.add_parser(
        "verify",
        help="Verdicts/s of rlep's verify_batch vs plain math-verify, agreement, latency, peak RSS; "
        "or, with --peer DIR, agreement on Math-Verify's regression cases.",
    )
    p.set_defaults(handler=_cmd_bench_verify)
    from verifiers.bench import add_arguments as add_verify_bench_arguments

    add_verify_bench_arguments(p)

    p = sub.add_parser("study", help="Compare replay designs over seeds: arms x seeds, bootstrap intervals, claims table (docs/study.md).")
    p.set_defaults(handler=_cmd_study)
    p.add_argument("--config", required=True, help="Study YAML (flows/configs/study-*.yaml).")
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="Seeds (overrides the file's).")
    p.add_argument("--out", default=None, help="Study directory (overrides the file's).")
    p.add_argument("--runner", choices=["local", "ray"], default=None, help="Where runs execute (overrides runner.kind).")
    p.add_argument("--prefect", action=argparse.BooleanOptionalAction, default=True,
                   help="Run as a Prefect flow (needed for --runner ray); --no-prefect runs the runs here, one after another.")

    p = sub.add_parser("show-config", help="Print the full default configuration of a command as YAML.")
    p.add_argument("command_name", choices=sorted(_config_commands()), metavar="COMMAND")
    p.set_defaults(handler=_cmd_show_config)
    return parser


def _quiet_libraries() -> None:
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    logging.getLogger("vllm").setLevel(logging.WARNING)


def _run_dir(args: argparse.Namespace) -> Path | None:
    """Where a run command's log goes: its --resume or out directory (none while its settings do not validate)."""
    if getattr(args, "resume", None):
        return Path(args.resume)
    try:
        return _config(_config_commands()[args.command][0], args).out
    except (ConfigError, ValueError):
        return None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.verbose:
        _quiet_libraries()
    from data.pool import PoolError
    from data.sources import ProblemSourceError
    from data.store import StoreError
    from tasks.engines import EngineUnavailable
    from tasks.models import ModelNotFound
    from tasks.training.checkpoint import CheckpointError

    user_errors = (UserError, ConfigError, ProblemSourceError, StoreError, EngineUnavailable, ModelNotFound, PoolError, CheckpointError)
    try:
        if args.verbose or args.command not in _config_commands():
            return args.handler(args)
        from flows.runlog import run_log

        with run_log(_run_dir(args)) as log:
            code = args.handler(args)
        if log is not None and log.is_file():
            print(f"library output (vLLM, torch, ...): {log}; rlep --verbose {args.command} shows it here")
        return code
    except user_errors as err:
        print(f"rlep {args.command}: error: {err}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
