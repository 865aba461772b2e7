"""The trajectory record: one row per sampled answer, the same schema in every shard, the pool and imports.

`TRAJECTORY_SCHEMA` is the single definition; `trajectory_row` / `rows_for_problem` build rows from what
generation and verification produce, `to_table` turns rows into a checked Arrow table, and
`as_trajectory_table` checks (and casts) a table read from elsewhere.

Columns, in order (the first sixteen are the project's required set; the rest are extras, each with the
reason it is stored rather than re-derived):

| column | type | null | meaning |
|---|---|---|---|
| `run_id` | string | no | Collection run that produced the row (the run directory's name by convention). |
| `problem_id` | string | no | Problem id, unique within its `data_source` (a problem is the pair). |
| `data_source` | string | no | Problem family (e.g. `tiny-math/frac`); metrics are reported per family. |
| `prompt` | string | no | Exact text the model was given (template applied). |
| `response` | string | no | Sampled answer text, as decoded by the engine. |
| `response_token_ids` | list<int32> | no | Token ids of `response`; empty when unknown (imported rows). |
| `behaviour_logprobs` | list<float32> | no | Log-prob of each sampled token under the distribution it was sampled from (the generating policy after temperature and top-p: vLLM's processed log-probs), same length as `response_token_ids`; the denominator of an off-policy importance ratio. Empty when unknown. |
| `extracted_answer` | string | yes | Final answer the verifier found in `response`; null when none was found (or not re-verified). |
| `gold_answer` | string | no | Reference answer of the problem. |
| `correct` | bool | no | Verifier verdict: `extracted_answer` is equivalent to `gold_answer`. |
| `verdict_reason` | string | no | Why: `equal`, `not-equal`, `no-answer`, `timeout`, `too-long`, `parse-error`, `memory`, `crash`, `unevaluated`; `imported` for rows read from another format without re-verification. |
| `reward` | float32 | no | Scalar reward given to this answer (scheme chosen at collection, e.g. binary 1/0). |
| `policy_version` | int32 | no | Training step of the weights that generated the row; 0 for a base model. |
| `model` | string | no | Model id or path the answer was sampled from. |
| `sampling` | string | no | JSON (sorted keys) of the sampling parameters: n, temperature, top_p, max_tokens, seed, stop. |
| `created_at` | timestamp[us, UTC] | no | When the row was built (after verification). |
| `sample_index` | int32 | no | Position of this answer among the problem's samples in its request (0..n-1); with `run_id`, `policy_version`, `data_source`, `problem_id` it is the row's key, which lets a resumed run prove it wrote no duplicates. |
| `finish_reason` | string | no | `stop` (end of sequence or a stop string) or `length` (truncated at max_tokens); overlong shaping and pool filters need it. |
| `level` | int32 | no | Difficulty level of the problem (1 = easiest), 0 when unknown; for per-level metrics. |
| `prompt_token_ids` | list<int32> | no | Token ids of `prompt` exactly as the engine saw them; re-tokenising text need not give the same ids, and training scores prompt + response. Empty when unknown. |
| `verify_seconds` | float32 | no | Wall time the verifier spent on this answer; finds pathological answers and feeds the time split. |
| `problem` | string | no | Problem text without the template, so a later stage (training, export) can re-render it with its own template. |
| `model_revision` | string | yes | Revision of the weights (a `weights_hash` value or an HF commit), null when unknown; tells rows of merged pools apart when `model` is the same path. |
| `origin` | string | no | `fresh` (sampled for this row's run) or `replay` (an earlier answer a training step trained on again: a training run writes both, so its data says exactly what it trained on). Files written before this column existed read as `fresh` (`OPTIONAL_COLUMNS`). |

The schema's metadata carries `rlep.schema_version`; bump it when a column changes meaning.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, Protocol

import pyarrow as pa

from rlep.data.problem import Problem

SCHEMA_VERSION = "2"  # 2: `origin` added (version-1 files read as fresh)

TRAJECTORY_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("problem_id", pa.string(), nullable=False),
        pa.field("data_source", pa.string(), nullable=False),
        pa.field("prompt", pa.string(), nullable=False),
        pa.field("response", pa.string(), nullable=False),
        pa.field("response_token_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("behaviour_logprobs", pa.list_(pa.float32()), nullable=False),
        pa.field("extracted_answer", pa.string(), nullable=True),
        pa.field("gold_answer", pa.string(), nullable=False),
        pa.field("correct", pa.bool_(), nullable=False),
        pa.field("verdict_reason", pa.string(), nullable=False),
        pa.field("reward", pa.float32(), nullable=False),
        pa.field("policy_version", pa.int32(), nullable=False),
        pa.field("model", pa.string(), nullable=False),
        pa.field("sampling", pa.string(), nullable=False),
        pa.field("created_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("sample_index", pa.int32(), nullable=False),
        pa.field("finish_reason", pa.string(), nullable=False),
        pa.field("level", pa.int32(), nullable=False),
        pa.field("prompt_token_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("verify_seconds", pa.float32(), nullable=False),
        pa.field("problem", pa.string(), nullable=False),
        pa.field("model_revision", pa.string(), nullable=True),
        pa.field("origin", pa.string(), nullable=False),
    ],
    metadata={"rlep.schema_version": SCHEMA_VERSION},
)

COLUMNS: tuple[str, ...] = tuple(TRAJECTORY_SCHEMA.names)
# Columns added after files were written without them, and the value such a file's rows read as.
OPTIONAL_COLUMNS: dict[str, Any] = {"origin": "fresh"}

# Problem ids are unique only within a data source (data.problem.Problem), so a problem is this pair.
PROBLEM_KEY: tuple[str, ...] = ("data_source", "problem_id")
# The key of a row: a resumed collection must never write the same key twice.
ROW_KEY: tuple[str, ...] = ("run_id", "policy_version", *PROBLEM_KEY, "sample_index")


class CompletionLike(Protocol):
    """The fields of `tasks.engines.base.Completion` a row needs (data/ must not import tasks/)."""

    text: str
    token_ids: Sequence[int]
    logprobs: Sequence[float]
    finish_reason: str
    prompt_token_ids: Sequence[int]


class VerdictLike(Protocol):
    """The fields of `verifiers.verdict.Verdict` a row needs."""

    correct: bool
    extracted: str | None
    reason: str
    seconds: float


def sampling_json(sampling: Mapping[str, Any]) -> str:
    """The `sampling` column's text: sorted keys so equal settings give equal strings (groupable)."""
    return json.dumps(dict(sampling), sort_keys=True, separators=(",", ":"))


def trajectory_row(
    problem: Problem,
    prompt: str,
    *,
    response: str,
    response_token_ids: Sequence[int],
    behaviour_logprobs: Sequence[float],
    finish_reason: str,
    correct: bool,
    extracted_answer: str | None,
    verdict_reason: str,
    reward: float,
    run_id: str,
    policy_version: int,
    model: str,
    sampling: Mapping[str, Any],
    sample_index: int,
    prompt_token_ids: Sequence[int] = (),
    verify_seconds: float = 0.0,
    created_at: datetime | None = None,
    model_revision: str | None = None,
    origin: str = "fresh",
) -> dict[str, Any]:
    """One trajectory row (a dict with exactly the schema's columns) from plain fields.

    Raises ValueError when token ids and (known, i.e. non-empty) log-probs differ in length: a row whose
    log-probs cannot be aligned with its tokens would silently corrupt every importance ratio computed from it.
    """
    if behaviour_logprobs and len(response_token_ids) != len(behaviour_logprobs):
        raise ValueError(
            f"problem {problem.id!r} sample {sample_index}: {len(response_token_ids)} token ids but "
            f"{len(behaviour_logprobs)} log-probs"
        )
    if policy_version < 0:
        raise ValueError(f"policy_version must be >= 0, got {policy_version}")
    return {
        "run_id": run_id,
        "problem_id": problem.id,
        "data_source": problem.data_source,
        "prompt": prompt,
        "response": response,
        "response_token_ids": list(response_token_ids),
        "behaviour_logprobs": list(behaviour_logprobs),
        "extracted_answer": extracted_answer,
        "gold_answer": problem.answer,
        "correct": bool(correct),
        "verdict_reason": verdict_reason,
        "reward": float(reward),
        "policy_version": int(policy_version),
        "model": model,
        "sampling": sampling_json(sampling),
        "created_at": created_at or datetime.now(timezone.utc),
        "sample_index": int(sample_index),
        "finish_reason": finish_reason,
        "level": int(problem.level),
        "prompt_token_ids": list(prompt_token_ids),
        "verify_seconds": float(verify_seconds),
        "problem": problem.problem,
        "model_revision": model_revision,
        "origin": origin,
    }


def rows_for_problem(
    problem: Problem,
    prompt: str,
    completions: Sequence[CompletionLike],
    verdicts: Sequence[VerdictLike],
    rewards: Sequence[float],
    *,
    run_id: str,
    policy_version: int,
    model: str,
    sampling: Mapping[str, Any],
    created_at: datetime | None = None,
    model_revision: str | None = None,
) -> list[dict[str, Any]]:
    """Rows for all sampled answers of one problem; `sample_index` is the position in `completions`.

    `completions`, `verdicts` and `rewards` are parallel (one entry per answer). Every row of the call
    shares one `created_at`, so a problem's answers sort together.
    """
    if not len(completions) == len(verdicts) == len(rewards):
        raise ValueError(
            f"problem {problem.id!r}: {len(completions)} completions, {len(verdicts)} verdicts, {len(rewards)} rewards"
        )
    created_at = created_at or datetime.now(timezone.utc)
    return [
        trajectory_row(
            problem,
            prompt,
            response=completion.text,
            response_token_ids=completion.token_ids,
            behaviour_logprobs=completion.logprobs,
            finish_reason=completion.finish_reason,
            prompt_token_ids=completion.prompt_token_ids,
            correct=verdict.correct,
            extracted_answer=verdict.extracted,
            verdict_reason=verdict.reason,
            verify_seconds=verdict.seconds,
            reward=reward,
            run_id=run_id,
            policy_version=policy_version,
            model=model,
            sampling=sampling,
            sample_index=index,
            created_at=created_at,
            model_revision=model_revision,
        )
        for index, (completion, verdict, reward) in enumerate(zip(completions, verdicts, rewards, strict=True))
    ]


def to_table(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """Rows (dicts with exactly the schema's columns) as a table of `TRAJECTORY_SCHEMA`.

    Raises ValueError naming the first row whose keys differ from the schema, or a required column
    holding nulls; Arrow itself would fill a missing key with null and drop an unknown one silently.
    """
    expected = set(COLUMNS)
    for index, row in enumerate(rows):
        if row.keys() != expected:
            missing, extra = sorted(expected - row.keys()), sorted(row.keys() - expected)
            raise ValueError(f"trajectory row {index}: missing columns {missing}, unknown columns {extra}")
    return _check_nulls(pa.Table.from_pylist(list(rows), schema=TRAJECTORY_SCHEMA))


def as_trajectory_table(table: pa.Table, origin: str = "table") -> pa.Table:
    """`table` with the schema's columns in order and types cast to it; `origin` names it in errors.

    Extra columns are an error rather than dropped: they mean the table is not what the caller thinks.
    """
    check_columns(table.column_names, origin)
    table = with_optional_columns(table)
    try:
        table = table.select(list(COLUMNS)).cast(TRAJECTORY_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
        raise ValueError(f"{origin}: columns do not cast to the trajectory schema: {err}") from None
    return _check_nulls(table, origin)


def check_columns(names: Sequence[str], origin: str) -> None:
    """Raise ValueError naming `origin` unless `names` are the schema's columns (any order; those of
    OPTIONAL_COLUMNS may be missing)."""
    missing = [c for c in COLUMNS if c not in set(names) and c not in OPTIONAL_COLUMNS]
    extra = sorted(set(names) - set(COLUMNS))
    if missing or extra:
        raise ValueError(f"{origin}: not a trajectory table (missing columns {missing}, unknown columns {extra})")


def _check_nulls(table: pa.Table, origin: str = "trajectory rows") -> pa.Table:
    for field in TRAJECTORY_SCHEMA:
        if not field.nullable and table.column(field.name).null_count:
            raise ValueError(f"{origin}: column {field.name!r} is required but holds nulls")
    return table


def with_optional_columns(table: pa.Table) -> pa.Table:
    """`table` with every missing OPTIONAL_COLUMNS column added, holding its default on every row."""
    for name, value in OPTIONAL_COLUMNS.items():
        if name not in table.column_names:
            table = table.append_column(
                TRAJECTORY_SCHEMA.field(name), pa.array([value] * table.num_rows, TRAJECTORY_SCHEMA.field(name).type)
            )
    return table
