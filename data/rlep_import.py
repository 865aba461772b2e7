"""A pool in the RLEP / verl Parquet layout (data/rlep_format.py) read back into rlep's trajectory schema.

Import reads a file with candidates into the trajectory schema, one row per candidate (a file without any
candidate is an error: it is a problem file, load it as a problem source). Given the training problems,
each imported problem takes the (data_source, id) of the training problem it matches, by the same rule
as the export (data.verl_rows), and the match rate is reported: a pool trains only on problems whose keys
the training problems carry.

Round trip: `export_pool(pool) -> import_pool -> export_pool` gives an identical table, and a training
file exported into, imported and exported into again gives the same file.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rlep.data.fs import write_parquet_atomic
from rlep.data.problem import Problem
from rlep.data.run_layout import POOL_FILE
from rlep.data.store import StoreError
from rlep.data.trajectory import TRAJECTORY_SCHEMA, sampling_json, to_table
from rlep.data.verl_rows import Matcher, index_text, norm_text, read_verl, row_texts, user_content

# What an imported row gets for the fields RLEP's layout does not carry.
IMPORT_DEFAULTS: dict[str, Any] = {
    "response_token_ids": [],  # RLEP re-tokenises candidate texts; no ids are stored
    "behaviour_logprobs": [],  # unknown: replay of these rows cannot use importance ratios
    "prompt_token_ids": [],
    "extracted_answer": None,  # not re-verified on import
    "correct": True,  # candidates are verified successes by RLEP's definition
    "verdict_reason": "imported",
    "reward": 1.0,  # the binary scheme's value for a correct answer
    "policy_version": 0,
    "model": "imported",
    "model_revision": None,
    "sampling": sampling_json({}),
    "finish_reason": "stop",  # RLEP appends EOS to every candidate, i.e. treats it as complete
    "verify_seconds": 0.0,
    "origin": "fresh",
}


@dataclass
class ImportReport:
    """What an import wrote, and how its problems matched the training problems (when given)."""

    path: Path
    rows: int  # answers written
    problems: int  # problems with at least one answer
    skipped_rows: int  # file rows without candidates (problems, not experience)
    matched_by_id: int | None = None
    matched_by_text: int | None = None
    unmatched: int | None = None
    gold_differs: int | None = None  # matched problems whose gold answer differs from the training problem's

    @property
    def match_rate(self) -> float | None:
        if self.unmatched is None:
            return None
        return (self.matched_by_id + self.matched_by_text) / self.problems if self.problems else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "path": str(self.path), "match_rate": self.match_rate}


def import_pool(
    path: Path | str,
    out_path: Path | str,
    *,
    run_id: str = "imported",
    model: str = IMPORT_DEFAULTS["model"],
    created_at: datetime | None = None,
    problems: list[Problem] | None = None,
) -> ImportReport:
    """Read an RLEP/verl file with `reward_model.candidates` and write one trajectory row per candidate to
    `out_path` (a directory, or a name without a suffix, gets POOL_FILE inside: a run-like directory that
    `rlep train --pool` and `rlep inspect` accept).

    Field mapping: `problem_id` is `extra_info.problem_id`, else `extra_info.index` (as text), else the row
    number; `data_source` is `extra_info.rlep_data_source`, else the row's; `prompt` is the content of the
    chat's last user message; `problem` is `extra_info.problem`, else that same content; `level` is
    `extra_info.level`, else 0; `gold_answer` is `ground_truth` as text (JSON for a list or mapping);
    `sample_index` is the candidate's position. All other fields are `IMPORT_DEFAULTS`, with `created_at`
    one timestamp for the whole file (now unless given).

    `problems` (the training problems): each imported problem takes the id and data_source of the one it
    matches (module docstring); unmatched ones keep their own, and the report counts both. Raises
    StoreError naming the file when a required column or field is missing, when no row has a candidate,
    or when `problems` are given and none matches; nothing is written then.
    """
    path, out_path = Path(path), Path(out_path)
    if out_path.is_dir() or not out_path.suffix:
        out_path = out_path / POOL_FILE
    table = read_verl(path)
    created_at = created_at or datetime.now(timezone.utc)
    matcher = Matcher([(p.id, _problem_texts(p), p) for p in problems]) if problems is not None else None
    counts = {"id": 0, "text": 0, None: 0}
    rows, skipped, solved, gold_differs = [], 0, 0, 0
    for number, record in enumerate(table.to_pylist()):
        reward_model = record["reward_model"] or {}
        if "ground_truth" not in reward_model:
            raise StoreError(f"{path}: row {number} has no reward_model.ground_truth")
        candidates = reward_model.get("candidates") or []
        if not candidates:
            skipped += 1
            continue
        extra = record.get("extra_info") or {}
        content = user_content(record["prompt"], path, number)
        problem_id = extra.get("problem_id") or (index_text(record) or str(number))
        data_source = extra.get("rlep_data_source") or record["data_source"]
        gold = _as_text(reward_model["ground_truth"])
        solved += 1
        if matcher is not None:
            found, how = matcher.match(
                index_text(record) if extra.get("problem_id") is None else problem_id, row_texts(record, path, number)
            )
            counts[how] += 1
            if found is not None:
                problem_id, data_source = found.id, found.data_source
                gold_differs += found.answer != gold
        for index, candidate in enumerate(candidates):
            rows.append(
                {
                    **IMPORT_DEFAULTS,
                    "run_id": run_id,
                    "model": model,
                    "problem_id": problem_id,
                    "data_source": data_source,
                    "prompt": content,
                    "problem": extra["problem"] if extra.get("problem") is not None else content,
                    "level": int(extra.get("level") or 0),
                    "gold_answer": gold,
                    "response": candidate,
                    "sample_index": index,
                    "created_at": created_at,
                }
            )
    if not rows:
        raise StoreError(
            f"{path}: none of its {table.num_rows} rows has reward_model.candidates, so there is no "
            "experience to import (a problem file: use it as --source instead)"
        )
    if matcher is not None and counts[None] == solved:
        raise StoreError(
            f"{path}: none of its {solved} problems with candidates is among the {len(problems)} "
            "training problems (matched by extra_info.index, then by problem text)"
        )
    written = write_parquet_atomic(Path(out_path), to_table(rows), schema=TRAJECTORY_SCHEMA)
    report = ImportReport(path=written, rows=len(rows), problems=solved, skipped_rows=skipped)
    if matcher is not None:
        report.matched_by_id, report.matched_by_text, report.unmatched = counts["id"], counts["text"], counts[None]
        report.gold_differs = gold_differs
    return report


def _problem_texts(problem: Problem) -> set[str]:
    extra = getattr(problem, "extra", None) or {}
    texts = {problem.problem, extra.get("question")}
    for message in getattr(problem, "messages", None) or ():
        if message.get("role") == "user":
            texts.add(message.get("content"))
    return {t for t in map(norm_text, texts) if t}


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list | dict):
        return json.dumps(value, sort_keys=True)
    return str(value)
