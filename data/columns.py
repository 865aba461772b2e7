"""Reading one cell of a problem file: nested column paths, text cells, chat-message cells.

A column is named by a path: `problem`, or `reward_model.ground_truth` for a field of a struct (dict)
column, as verl's files nest their gold answer. A column whose own name holds a dot is found first.
A cell where text is expected must be text (or a number); a list or dict there is refused with one
message naming the file, the row and the column: turning it into its Python repr would hand the model
and the verifier `"{'style': 'rule', ...}"` as a problem or a gold answer.
"""

from __future__ import annotations

import math
from typing import Any

MISSING = object()  # a column the row does not have (unlike a None cell of a column it has)


class CellError(ValueError):
    """A cell that cannot be read as asked; the message names the file, the row and the column."""


def cell(row: dict[str, Any], path: str) -> Any:
    """The value at `path` in `row` (`a.b` = field `b` of struct column `a`), or `MISSING`."""
    if path in row:
        return row[path]
    node: Any = row
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return MISSING
        node = node[part]
    return node


def has_column(row: dict[str, Any], path: str) -> bool:
    """Whether `row` has the column `path` (a None struct along the path counts as absent)."""
    return cell(row, path) is not MISSING


def column_names(row: dict[str, Any], prefix: str = "") -> list[str]:
    """Every column path of `row`, struct fields included (`reward_model`, `reward_model.style`, ...)."""
    names = []
    for key, value in row.items():
        names.append(prefix + key)
        if isinstance(value, dict):
            names += column_names(value, f"{prefix}{key}.")
    return names


def text_cell(value: Any, where: str) -> str | None:
    """`value` as text: strings as they are, integers and integral floats as digits (`12.0` -> `12`);
    None, NaN or blank text -> None (missing). A list, dict or other object is a `CellError` naming `where`."""
    if value is None or value is MISSING:
        return None
    if isinstance(value, str):
        return value if value.strip() else None
    if isinstance(value, bool):
        raise CellError(f"{where}: expected text, got a boolean ({value})")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return None
        return str(int(value)) if value.is_integer() else repr(value)
    kind = (
        "a list" if isinstance(value, (list, tuple)) else "a dict" if isinstance(value, dict) else type(value).__name__
    )
    raise CellError(f"{where}: expected text, got {kind}{_shape(value)}")


def chat_messages(value: Any, where: str) -> tuple[dict[str, str], ...]:
    """A chat-message cell (`[{"role": "user", "content": "..."}, ...]`, verl's `prompt`) as a tuple of
    {role, content} dicts in order; a `CellError` naming `where` if it is not one."""
    if not isinstance(value, (list, tuple)) or not value:
        raise CellError(f"{where}: expected a non-empty list of chat messages {{role, content}}")
    messages = []
    for number, message in enumerate(value):
        if (
            not isinstance(message, dict)
            or not isinstance(message.get("role"), str)
            or not isinstance(message.get("content"), str)
        ):
            raise CellError(f"{where}: message {number} is not a {{role, content}} pair of strings")
        messages.append({"role": message["role"], "content": message["content"]})
    return tuple(messages)


def last_user_message(messages: tuple[dict[str, str], ...], where: str) -> str:
    """The content of the last `user` message: the problem, in a chat prompt (as verl's preprocessing
    writes it: one user message holding the question and its instruction)."""
    for message in reversed(messages):
        if message["role"] == "user":
            return message["content"]
    raise CellError(f"{where}: no message with role 'user' among roles {[m['role'] for m in messages]}")


def is_chat_messages(value: Any) -> bool:
    """Whether a cell looks like a list of chat messages (dicts with a `role`)."""
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(m, dict) and "role" in m for m in value)


def _shape(value: Any) -> str:
    if isinstance(value, dict):
        return f" with keys {sorted(map(str, value))}"
    if isinstance(value, (list, tuple)):
        return f" of {len(value)} items"
    return ""
