"""The rows of a verl training file as pool answers are written onto them and read back from them.

A pool problem is a row of such a file when its id is the row's `extra_info.index` (as text) and their
problem texts do not disagree, or else when their problem texts are equal (whitespace collapsed). The
same rule matches an imported row to a training problem (data.rlep_import). A row keeps its own columns
and types; `with_candidates` gives its schema the `reward_model.candidates` list RLEP reads.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from rlep.data.store import StoreError


def read_verl(path: Path) -> pa.Table:
    """A verl / RLEP Parquet file, checked for the columns a row needs. Raises StoreError naming it."""
    if not Path(path).exists():
        raise StoreError(f"{path}: no such file")
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowInvalid) as err:
        raise StoreError(f"{path}: unreadable Parquet file: {err}") from None
    missing = [c for c in ("data_source", "prompt", "reward_model") if c not in table.column_names]
    if missing:
        raise StoreError(f"{path}: not an RLEP/verl file (missing columns {missing})")
    return table


def norm_text(text: Any) -> str | None:
    """A problem text as two files' copies are compared: whitespace runs collapsed, ends trimmed."""
    if not isinstance(text, str):
        return None
    return re.sub(r"\s+", " ", text).strip() or None


def user_content(prompt: Any, path: Path, number: int) -> str:
    """The last user message of row `number`'s prompt (a plain-text prompt is that message)."""
    if isinstance(prompt, str):  # some verl datasets store the prompt as plain text
        return prompt
    users = [m.get("content") for m in prompt or [] if isinstance(m, dict) and m.get("role") == "user"]
    if not users or not isinstance(users[-1], str):
        raise StoreError(f"{path}: row {number} has no user message in its prompt")
    return users[-1]


def row_texts(record: dict[str, Any], path: Path, number: int) -> set[str]:
    """The problem texts a verl row is known by: its last user message, extra_info's problem / question."""
    extra = record.get("extra_info") or {}
    texts = {user_content(record["prompt"], path, number), extra.get("problem"), extra.get("question")}
    return {t for t in map(norm_text, texts) if t}


def index_text(record: dict[str, Any]) -> str | None:
    """A row's `extra_info.index` as text (the id a problem source gives it), None when it has none."""
    index = (record.get("extra_info") or {}).get("index")
    return None if index is None else str(index)


class Matcher:
    """Finds the training problem (or row) an imported / pooled problem is: the same id with no
    disagreeing text, else the same problem text."""

    def __init__(self, items: list[tuple[str, set[str], Any]]) -> None:
        self.by_id = {ident: (texts, item) for ident, texts, item in items}
        self.by_text: dict[str, Any] = {}
        for _, texts, item in items:
            for text in texts:
                self.by_text.setdefault(text, item)

    def match(self, ident: str | None, texts: set[str]) -> tuple[Any, str | None]:
        found = self.by_id.get(ident) if ident is not None else None
        if found is not None and (not texts or not found[0] or texts & found[0]):
            return found[1], "id"
        for text in texts:
            if text in self.by_text:
                return self.by_text[text], "text"
        return None, None


def rows_of(problems: dict[tuple[str, str], dict[str, Any]], records: list[dict], path: Path) -> dict[Any, int]:
    """Pool problem key -> the number of the row of `records` (file `path`) it is; unmatched ones left out."""
    matcher = Matcher([(index_text(r), row_texts(r, path, n), n) for n, r in enumerate(records)])
    found = {}
    for key, entry in problems.items():
        texts = {t for t in map(norm_text, (entry["problem"], entry["prompt"])) if t}
        number, _ = matcher.match(entry["problem_id"], texts)
        if number is not None:
            found[key] = number
    return found


def with_candidates(schema: pa.Schema) -> pa.Schema:
    """The training file's own schema, its `reward_model` struct given a `candidates` list of strings."""
    index = schema.get_field_index("reward_model")
    reward_model = schema.field(index)
    if not pa.types.is_struct(reward_model.type):
        raise StoreError(f"reward_model is {reward_model.type}, not a struct: not a verl training file")
    fields = [f for f in reward_model.type if f.name != "candidates"] + [pa.field("candidates", pa.list_(pa.string()))]
    return schema.set(index, reward_model.with_type(pa.struct(fields)))
