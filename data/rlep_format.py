"""The experience pool in the RLEP / verl Parquet layout, and back.

verl's RL datasets (verl `docs/preparation/prepare_data.rst`, `examples/data_preprocess/*.py`) hold one
row per problem with five columns: `data_source`, `prompt` (a chat: a list of {"role", "content"}),
`ability`, `reward_model` = {"style": "rule", "ground_truth": ...} and `extra_info` (free-form; verl reads
`index`). RLEP (Kwai-Klear/RLEP, a verl fork) keeps its experience pool inside that same training file:
`reward_model["candidates"]` is the list of verified-correct response texts of the problem (its
`verl/utils/dataset/rl_dataset.py` reads it when `data.with_experience_replay` is on, samples
`data.experience_replay_num` of them per step, and re-tokenises each as `encode(text) + [eos]`; a null
list counts as empty). The released file `dapo-math-17k-with-experience-pool.parquet` is that layout.

What the export writes, per problem of the pool (in pool order):

    data_source   the row's data_source
    prompt        [{"role": "user", "content": <our rendered prompt>}]
    ability       "math"
    reward_model  {"style": "rule", "ground_truth": <gold_answer>, "candidates": [<response>, ...]}
    extra_info    {"index": <row number>, "problem_id": ..., "problem": <text without template>, "level": ...}

Differences from RLEP's own file, on purpose or by necessity:
- RLEP's `prompt` content is the bare question plus an instruction, and verl applies the model's chat
  template on top. Ours is the prompt the pool's answers were sampled from (template already applied), so
  a chat model would see it wrapped twice; the raw question is in `extra_info["problem"]` for re-rendering.
- RLEP ships problems with no candidates in the same file (training still samples them); the pool holds
  only solved problems, so every exported row has at least one candidate, and `import_pool` skips rows
  without candidates (they are problems, not experience: load them as a problem source instead).
- `candidates` are texts only (as in RLEP). Token ids, behaviour log-probs, verdict details, policy
  version and model are not carried; `import_pool` fills them with the defaults in `IMPORT_DEFAULTS`.
- RLEP's base trainer (`verl/trainer/ppo/ray_trainer.py`) also reads top-level `source_marker` and
  `pos_candidates` columns for logging; its RLEP recipe (`recipe.dapo.main_dapo`) does not, and neither
  column is written here.

Round trip: `export_pool(pool) -> import_pool -> export_pool` gives an identical table.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from data.fs import write_parquet_atomic
from data.store import StoreError, read_trajectory_files
from data.trajectory import TRAJECTORY_SCHEMA, sampling_json, to_table

ABILITY = "math"
REWARD_STYLE = "rule"

RLEP_SCHEMA = pa.schema(
    [
        pa.field("data_source", pa.string()),
        pa.field("prompt", pa.list_(pa.struct([pa.field("role", pa.string()), pa.field("content", pa.string())]))),
        pa.field("ability", pa.string()),
        pa.field(
            "reward_model",
            pa.struct(
                [
                    pa.field("style", pa.string()),
                    pa.field("ground_truth", pa.string()),
                    pa.field("candidates", pa.list_(pa.string())),
                ]
            ),
        ),
        pa.field(
            "extra_info",
            pa.struct(
                [
                    pa.field("index", pa.int64()),
                    pa.field("problem_id", pa.string()),
                    pa.field("problem", pa.string()),
                    pa.field("level", pa.int32()),
                ]
            ),
        ),
    ]
)

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


def export_pool(pool_path: Path | str, out_path: Path | str) -> Path:
    """Write the pool at `pool_path` (trajectory schema) as an RLEP/verl training file; returns `out_path`.

    One row per problem (data_source, problem_id), in order of first appearance; `candidates` keep pool
    order. Raises StoreError when one problem carries two different gold answers (the pool mixes two
    versions of a dataset).
    """
    pool = read_trajectory_files(
        [Path(pool_path)], ["problem_id", "data_source", "prompt", "problem", "gold_answer", "level", "response"]
    )
    problems: dict[tuple[str, str], dict[str, Any]] = {}
    for row in pool.to_pylist():
        key = (row["data_source"], row["problem_id"])
        entry = problems.get(key)
        if entry is None:
            problems[key] = {
                "data_source": row["data_source"],
                "prompt": [{"role": "user", "content": row["prompt"]}],
                "ability": ABILITY,
                "reward_model": {"style": REWARD_STYLE, "ground_truth": row["gold_answer"], "candidates": [row["response"]]},
                "extra_info": {
                    "index": len(problems),
                    "problem_id": row["problem_id"],
                    "problem": row["problem"],
                    "level": row["level"],
                },
            }
            continue
        if entry["reward_model"]["ground_truth"] != row["gold_answer"]:
            raise StoreError(
                f"{pool_path}: problem {row['problem_id']!r} of {row['data_source']!r} has two gold answers "
                f"({entry['reward_model']['ground_truth']!r} and {row['gold_answer']!r})"
            )
        entry["reward_model"]["candidates"].append(row["response"])
    table = pa.Table.from_pylist(list(problems.values()), schema=RLEP_SCHEMA)
    return write_parquet_atomic(Path(out_path), table)


def import_pool(
    path: Path | str,
    out_path: Path | str,
    *,
    run_id: str = "imported",
    model: str = IMPORT_DEFAULTS["model"],
    created_at: datetime | None = None,
) -> Path:
    """Read an RLEP/verl file with `reward_model.candidates` and write one trajectory row per candidate.

    Field mapping: `problem_id` is `extra_info.problem_id`, else `extra_info.index`, else the row number;
    `prompt` is the content of the chat's last user message (system messages are dropped); `problem` is
    `extra_info.problem`, else that same content; `level` is `extra_info.level`, else 0; `gold_answer` is
    `ground_truth` as text (JSON for a list or mapping); `sample_index` is the candidate's position. All
    other fields are `IMPORT_DEFAULTS`, with `created_at` one timestamp for the whole file (now unless
    given). Raises StoreError naming the file when a required column or field is missing.
    """
    path = Path(path)
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowInvalid) as err:
        raise StoreError(f"{path}: unreadable Parquet file: {err}") from None
    missing = [c for c in ("data_source", "prompt", "reward_model") if c not in table.column_names]
    if missing:
        raise StoreError(f"{path}: not an RLEP/verl file (missing columns {missing})")
    created_at = created_at or datetime.now(timezone.utc)
    rows = []
    for number, record in enumerate(table.to_pylist()):
        reward_model = record["reward_model"] or {}
        if "ground_truth" not in reward_model:
            raise StoreError(f"{path}: row {number} has no reward_model.ground_truth")
        extra = record.get("extra_info") or {}
        content = _user_content(record["prompt"], path, number)
        problem_id = extra.get("problem_id") or (str(extra["index"]) if extra.get("index") is not None else str(number))
        for index, candidate in enumerate(reward_model.get("candidates") or []):
            rows.append(
                {
                    **IMPORT_DEFAULTS,
                    "run_id": run_id,
                    "model": model,
                    "problem_id": problem_id,
                    "data_source": record["data_source"],
                    "prompt": content,
                    "problem": extra["problem"] if extra.get("problem") is not None else content,
                    "level": int(extra.get("level") or 0),
                    "gold_answer": _as_text(reward_model["ground_truth"]),
                    "response": candidate,
                    "sample_index": index,
                    "created_at": created_at,
                }
            )
    return write_parquet_atomic(Path(out_path), to_table(rows), schema=TRAJECTORY_SCHEMA)


def _user_content(prompt: Any, path: Path, number: int) -> str:
    if isinstance(prompt, str):  # some verl datasets store the prompt as plain text
        return prompt
    users = [m.get("content") for m in prompt or [] if isinstance(m, dict) and m.get("role") == "user"]
    if not users or not isinstance(users[-1], str):
        raise StoreError(f"{path}: row {number} has no user message in its prompt")
    return users[-1]


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list | dict):
        return json.dumps(value, sort_keys=True)
    return str(value)
