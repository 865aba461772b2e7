"""`rlep bench ...`: the benchmarks, each a thin command over its module in rlep.tasks.bench (or the verifiers'
bench); results go to bench/results/*.json."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rlep.flows.commands.common import check_pool, config_from_args
from rlep.flows.options import add_model_flags, build_config, build_from_flags, flag_overrides


def add_bench(sub) -> None:
    from rlep.tasks.bench.generate import GenerateBenchConfig

    bench = sub.add_parser("bench", help="Benchmarks; results go to bench/results/*.json.")
    bench_sub = bench.add_subparsers(dest="bench", required=True, metavar="BENCH")
    p = bench_sub.add_parser(
        "generate", help="Tokens/s of the vLLM and transformers engines on the same model and prompts."
    )
    p.set_defaults(handler=cmd_bench_generate)
    # each bench's --config: the file its settings come from, not a setting itself
    p.add_argument("--config", type=Path, default=None, help="YAML file of settings; flags override it.")
    add_model_flags(p, GenerateBenchConfig)
    p = bench_sub.add_parser(
        "train", help="Held-out accuracy before/after, step time split and replay overhead: replay arm vs baseline."
    )
    p.set_defaults(handler=cmd_bench_train)
    p.add_argument(
        "--config", type=Path, default=None, help="Pipeline YAML (e.g. flows/configs/demo.yaml); flags override it."
    )
    from rlep.tasks.bench.train import TrainBenchOutput
    from rlep.tasks.settings.pipeline import PipelineConfig

    add_model_flags(p, TrainBenchOutput, namespace="bench")  # where the result goes: not in the pipeline's file
    add_model_flags(p, PipelineConfig)
    p = bench_sub.add_parser(
        "async",
        help="Steps/s of async training against sync on the same settings (FIFO replay), CPU use, overlap ceiling "
        "(docs/async.md).",
    )
    p.set_defaults(handler=cmd_bench_async)
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
    p.set_defaults(handler=cmd_bench_fanout)
    p.add_argument("--config", type=Path, default=None, help="YAML file of the bench's settings; flags override it.")
    from rlep.tasks.bench.fanout import FanoutBenchConfig

    add_model_flags(p, FanoutBenchConfig)
    p = bench_sub.add_parser(
        "verify",
        help="Verdicts/s of rlep's verify_batch vs plain math-verify, agreement, latency, peak RSS; "
        "or, with --peer DIR, agreement on Math-Verify's regression cases.",
    )
    p.set_defaults(handler=cmd_bench_verify)
    from rlep.tasks.settings.bench import VerifyBenchConfig

    add_model_flags(p, VerifyBenchConfig)
    p = bench_sub.add_parser(
        "update",
        help="The policy update alone on synthetic rollouts (random-weight model from an HF config): step time, "
        "tokens/s, "
        "MFU, parameter + optimizer and peak memory per rank; --nproc N with ddp | fsdp2 (docs/distributed.md).",
    )
    p.set_defaults(handler=cmd_bench_update)
    from rlep.tasks.bench.update import MODEL_CONFIG_HELP, UpdateBenchConfig

    add_model_flags(p, UpdateBenchConfig)
    # another spelling of --model, not a setting of its own
    p.add_argument("--model-config", dest="cfg:model", default=argparse.SUPPRESS, help=MODEL_CONFIG_HELP)
    p = bench_sub.add_parser(
        "gpu",
        help="The GPU acceptance check in under 10 minutes: FSDP2 on NCCL with checkpoint and resume, the training "
        "loop on the GPU, update tokens/s and MFU (by 6N and with attention) of Qwen2.5-0.5B/1.5B shapes against "
        "each line's MFU floor and memory ceiling, the loop with vLLM ('not verified' where vLLM does not import); "
        "exit 0 passed, 1 failed or incomplete, 3 not verified; --device cpu: the same, small (docs/gpu.md).",
    )
    p.set_defaults(handler=cmd_bench_gpu)
    from rlep.tasks.bench.gpu import GpuCheckConfig

    add_model_flags(p, GpuCheckConfig)
    p = bench_sub.add_parser(
        "sync",
        help="The extra host memory of one weight sync, trainer -> engine (in process or to a generator process): "
        "peak resident set per sync, kernel-measured (docs/async.md).",
    )
    p.set_defaults(handler=cmd_bench_sync)
    from rlep.tasks.bench.sync import SyncBenchConfig

    add_model_flags(p, SyncBenchConfig)


def cmd_bench_async(args: argparse.Namespace) -> int:
    from rlep.tasks.bench.async_train import AsyncBenchConfig, run_async_bench

    config = config_from_args(AsyncBenchConfig, args)
    from rlep.tasks.models import resolve_model

    resolve_model(config.train.model)  # a missing model fails here, before any run directory is made
    check_pool(config.train)
    report = run_async_bench(config)
    print(json.dumps(report["summary"], indent=2))
    print(f"wrote {report['path']}")
    return 0


def cmd_bench_fanout(args: argparse.Namespace) -> int:
    from rlep.tasks.bench.fanout import FanoutBenchConfig, run_fanout_bench

    report = run_fanout_bench(build_config(FanoutBenchConfig, args.config, flag_overrides(args)))
    print(json.dumps(report["summary"], indent=2))
    print(f"wrote {report['path']}")
    return 0


def cmd_bench_generate(args: argparse.Namespace) -> int:
    from rlep.tasks.bench.generate import GenerateBenchConfig, run_generate_bench

    config = build_config(GenerateBenchConfig, args.config, flag_overrides(args))
    report = run_generate_bench(config)
    print(json.dumps(report["summary"], indent=2))
    print(f"wrote {report['path']}")
    return 0


def cmd_bench_gpu(args: argparse.Namespace) -> int:
    from rlep.tasks.bench.gpu import GpuCheckConfig, check

    return check(build_from_flags(GpuCheckConfig, args))


def cmd_bench_train(args: argparse.Namespace) -> int:
    from rlep.tasks.bench.train import TrainBenchOutput, run_train_bench
    from rlep.tasks.collect import preflight, release_lock
    from rlep.tasks.settings.pipeline import PipelineConfig

    config = config_from_args(PipelineConfig, args)
    output = build_from_flags(TrainBenchOutput, args, namespace="bench")
    store, _, _ = preflight(config.collect)  # user errors surface here, before anything runs
    release_lock(store.root)  # the collection itself runs in another process
    report = run_train_bench(config, output.results)
    print(json.dumps(report["summary"], indent=2))
    print(f"wrote {report['path']}")
    return 0


def cmd_bench_verify(args: argparse.Namespace) -> int:
    from rlep.tasks.settings.bench import VerifyBenchConfig
    from rlep.verifiers.bench import run_bench

    run_bench(build_from_flags(VerifyBenchConfig, args))
    return 0


def cmd_bench_update(args: argparse.Namespace) -> int:
    from rlep.tasks.bench.update import UpdateBenchConfig, bench_update, summary

    report = bench_update(build_from_flags(UpdateBenchConfig, args))
    print(summary(report))
    print(f"report: {report['config']['out']}")
    return 0


def cmd_bench_sync(args: argparse.Namespace) -> int:
    from rlep.tasks.bench.sync import SyncBenchConfig, run

    run(build_from_flags(SyncBenchConfig, args))
    return 0
