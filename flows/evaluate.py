"""Prefect flow `evaluate`: avg@K / pass@K / maj@K of one model on a problem split, per data source.

Thin on purpose: the work is `tasks.evaluate.evaluate`; this flow runs it as a task and publishes the
result as artifacts (a table per data source and a markdown summary). Run it with `rlep eval ...`, from a
deployment (`rlep serve`), or in Python: `evaluate_flow(EvalConfig(model="tiny", samples=4))`.
"""

from __future__ import annotations

import logging

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from rlep.data.run_layout import EvalRunLayout
from rlep.flows.runlog import send_logs_to_prefect
from rlep.tasks.evaluate import EvalResult, evaluate
from rlep.tasks.settings.evaluate import EvalConfig

evaluate_task = task(evaluate, name="evaluate-model")
log = logging.getLogger("rlep.evaluate")


@flow(name="evaluate", log_prints=True)
def evaluate_flow(config: EvalConfig = EvalConfig()) -> EvalResult:
    """Evaluate `config.model` on `config.problems` with K = `config.samples` answers per problem."""
    send_logs_to_prefect()
    result = evaluate_task(config, progress=True)
    for row in result.rows:
        log.info(
            f"{row['data_source']}: avg@{config.samples} {row['avg_at_k']:.3f}, pass@{config.samples} "
            f"{row['pass_at_k']:.3f}, "
            f"maj@{config.samples} {row['maj_at_k']:.3f} over {row['n_problems']} problems"
        )
    table = [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()} for row in result.rows]
    create_table_artifact(key="eval-by-data-source", table=table, description=f"Evaluation of {config.model}")
    overall = result.overall()
    create_markdown_artifact(
        key="eval-summary",
        markdown=(
            f"# Evaluation of `{config.model}`\n\n"
            f"- problems: {overall['n_problems']} from `{config.problems.source}` split `{config.problems.split}`\n"
            f"- K = {config.samples}: avg@K **{overall['avg_at_k']:.3f}**, pass@K {overall['pass_at_k']:.3f}, "
            f"maj@K {overall['maj_at_k']:.3f}\n"
            f"- wall time: {result.seconds:.1f} s\n"
            + (
                f"- tables: `{EvalRunLayout(config.out).eval}`, `{EvalRunLayout(config.out).samples}`\n"
                if config.out
                else ""
            )
        ),
    )
    return result
