"""`rlep train`, `rlep eval`: train a policy, evaluate a model; each runs as a Prefect flow or, with --no-prefect,
calls its own function directly (`tasks.training.trainer.train`, `tasks.evaluate.evaluate`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rlep.data.run_layout import EvalRunLayout, TrainRunLayout
from rlep.flows.commands.common import UserError, check_inputs, check_pool, config_from_args
from rlep.flows.options import flag_overrides


def add_train_flags(p: argparse.ArgumentParser) -> None:
    """`rlep train`'s flags besides its settings': continuing a run."""
    p.add_argument(  # a run to continue: its saved settings are the base, so not a setting itself
        "--resume",
        type=Path,
        default=None,
        metavar="OUT",
        help="Continue the run in OUT from its last checkpoint (its saved settings; flags override).",
    )


def run_train(args: argparse.Namespace) -> int:
    from rlep.data.store import check_directory_possible
    from rlep.tasks.settings.train import TrainConfig

    if args.resume:
        if args.config is not None:  # it would be silently ignored: the run's own settings are the base
            raise UserError(
                f"--resume {args.resume} continues with the run's saved settings; --config {args.config} is not read "
                "with it (flags still change settings)"
            )
        out = flag_overrides(args).get("out")
        if out is not None and Path(out).resolve() != args.resume.resolve():  # it would be silently overridden
            raise UserError(
                f"--resume {args.resume} continues that run in its own directory; --out {out} cannot move it (a run "
                "of its own starts from a checkpoint with --model RUN/checkpoints/step-N)"
            )
        saved = TrainRunLayout(args.resume).config
        if not saved.is_file():
            raise UserError(f"--resume {args.resume}: no {saved.name} there (not a training run directory)")
        config = config_from_args(TrainConfig, args, base_file=saved, extra={"out": str(args.resume)})
    else:
        config = config_from_args(TrainConfig, args)
    check_pool(config)
    check_inputs(config.model, problems=config.problems, eval_problems=config.eval_problems)
    check_directory_possible(config.out)  # a file or an unwritable place: refused here, not after the model loads
    if not args.resume:  # before Prefect starts (train() checks again, for a run the UI starts)
        from rlep.tasks.training.backends.checkpoint import check_fresh_out

        check_fresh_out(config.out)
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


def run_eval(args: argparse.Namespace) -> int:
    from rlep.data.store import check_directory_possible
    from rlep.tasks.settings.evaluate import EvalConfig

    config = config_from_args(EvalConfig, args)
    check_inputs(config.model, problems=config.problems)
    if config.out is not None:
        check_directory_possible(config.out)
    if args.prefect:
        from rlep.flows.evaluate import evaluate_flow

        result = evaluate_flow(config)
    else:
        from rlep.tasks.engines.cache import release_engines
        from rlep.tasks.evaluate import evaluate

        try:
            result = evaluate(config)
        finally:
            release_engines()
    _print_eval(result.rows, config)
    return 0


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
