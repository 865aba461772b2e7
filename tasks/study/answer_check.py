"""The reward-hack check of a study: in every run's answers, the accepted ones that are not a number.

The verifier's equivalence is where a reward hack hides: restated sums ("The final answer is 11 + 24") passed as
their value and took over a policy within 10 steps (docs/results.md). So a study reads, for every run it
planned, the answers the verifier accepted: a collection's pool (what RLEP replays), a training run's own
rollouts (`fresh/`: what it trained on, and what response reuse replays) and its final evaluation's answers.
It counts the correct answers to a plain-number gold that are neither that gold nor a plain number, and those that
are a plain number of another value (the verifier accepting a wrong answer; `data.inspect.accepted_against_numbers`),
and keeps the first ones, for a person to read before believing a curve.
A run not finished yet has no final evaluation: that row is absent, not zero.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from rlep.data.inspect import accepted_against_numbers
from rlep.data.run_layout import CollectRunLayout, TrainRunLayout
from rlep.data.store import read_trajectory_files
from rlep.tasks.plan import Run
from rlep.tasks.study.plan import StudyError

_COLUMNS = ["problem_id", "extracted_answer", "gold_answer", "response", "correct"]
CHECK_COLUMNS = ["run", "arm", "seed", "answers", "correct", "not_literal", "share", "other_value", "examples"]


def _answer_files(run: Run) -> list[tuple[str, pa.Table]]:
    """(what, table) of every set of answers `run` left: its pool, its trained rollouts, its final evaluation."""
    found = []
    if run.kind in ("collect", "recollect"):
        pool = CollectRunLayout(run.config.out).pool
        if pool.is_file():
            found.append(("pool", read_trajectory_files([pool], _COLUMNS)))
    elif run.kind == "train" and not run.continues:  # a living-pool arm's first part holds the whole run's out
        layout = TrainRunLayout(run.config.out)
        parts = [path for _, path in layout.fresh_parts()]
        if parts:
            found.append(("trained rollouts", read_trajectory_files(parts, _COLUMNS)))
        samples = layout.final_eval.samples
        if samples.is_file():
            found.append(("final evaluation", _read_samples(samples)))
    return found


def _read_samples(path: Path) -> pa.Table:
    present = pq.read_schema(path).names
    missing = [name for name in _COLUMNS if name not in present]
    if missing:
        raise StudyError(f"{path}: no column {', '.join(missing)}; an evaluation's answers need {_COLUMNS}")
    return pq.read_table(path, columns=_COLUMNS)


def accepted_answers(runs: list[Run], examples: int = 3) -> pd.DataFrame:
    """One row per (run, set of answers): the correct answers to a plain-number gold (`correct`), those that are
    not a plain number (`not_literal`, `share` of `correct`), those that are a plain number of another value
    (`other_value`), and the first `examples` of each (JSON text: why, problem_id, extracted_answer, gold_answer,
    response cut to 120 characters)."""
    rows = []
    for run in runs:
        for what, table in _answer_files(run):
            found = accepted_against_numbers(table, examples=examples)
            odd, other, correct = found["not_literal"], found["other_value"], found["not_literal"]["of_correct"]
            shown = [{"why": why, **row} for why in found for row in found[why]["examples"]][:examples]
            rows.append(
                {
                    "run": run.key,
                    "arm": run.arm or "",
                    "seed": run.seed,
                    "answers": what,
                    "correct": correct,
                    "not_literal": odd["count"],
                    "share": odd["count"] / correct if correct else float("nan"),
                    "other_value": other["count"],
                    "examples": json.dumps(shown),
                }
            )
    return pd.DataFrame(rows, columns=CHECK_COLUMNS)


def answer_check_markdown(checks: pd.DataFrame) -> str:
    """The check per run and set of answers, then the first answers it found, for a person to read."""
    if checks.empty:
        return "No run has left answers yet.\n"
    lines = [
        "Correct answers to a plain-number gold that are not a plain number, or a plain number of another value (the "
        "verifier's equivalence is where a reward hack hides): read the examples before believing a curve.",
        "",
        "| run | answers | correct | not a number | share | another number |",
        "|---|---|---|---|---|---|",
    ]
    for row in checks.itertuples(index=False):
        share = "n/a" if pd.isna(row.share) else f"{row.share:.1%}"
        lines.append(
            f"| {row.run} | {row.answers} | {row.correct:,} | {row.not_literal:,} | {share} | {row.other_value:,} |"
        )
    shown = [
        (row.run, row.answers, example)
        for row in checks.itertuples(index=False)
        for example in json.loads(row.examples)
    ]
    if shown:
        lines += ["", "First answers found (extracted answer; gold; response):", ""]
        for run, what, example in shown[:10]:
            response = " ".join(example["response"].split()).replace("|", "\\|")
            why = " (another number)" if example.get("why") == "other_value" else ""
            lines.append(
                f"- {run}, {what}, {example['problem_id']}{why}: `{example['extracted_answer']}`; "
                f"`{example['gold_answer']}`; {response}"
            )
    else:
        lines += ["", "None found: every accepted answer to a numeric gold is a plain number of the gold's value."]
    return "\n".join(lines) + "\n"
