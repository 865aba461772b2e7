"""verl's preprocessed problem layout, as a problem source reads it.

verl's examples/data_preprocess/*.py (gsm8k.py, math_dataset.py) write one row per problem:

    data_source   str                      names the scorer in verl's `default_compute_score` (`openai/gsm8k`, ...)
    prompt        list of {role, content}  the chat prompt; the question (with an instruction) is the user message
    ability       str                      `math`
    reward_model  {style, ground_truth}    `ground_truth` is the gold answer
    extra_info    {split, index, ...}      `index` is the row's number in its split (gsm8k.py adds `question`, `answer`)

and datasets such as DAPO-Math-17k ship the same layout with a string `extra_info.index` (a uuid). A source
reads the problem from the LAST user message of `prompt` (the chat stays on the Problem as `messages`),
the gold from `reward_model.ground_truth`, the id from `extra_info.index` (as text), the family from
`data_source`, the split from `extra_info.split`, and keeps what a writer needs to give the row back
(`verl_extra`): the original `data_source`, `ability`, `reward_model.style`, `extra_info.index` with its
own type, the split, and `extra_info.question` (gsm8k.py's question without the instruction) when present.
"""

from __future__ import annotations

from typing import Any

from rlep.data.columns import is_chat_messages

# The column each Problem field is read from in verl's layout (ProblemSourceConfig's `*_column` settings).
VERL_COLUMNS = {
    "problem_column": "prompt",
    "answer_column": "reward_model.ground_truth",
    "id_column": "extra_info.index",
    "data_source_column": "data_source",
    "split_column": "extra_info.split",
}


def looks_like_verl(row: dict[str, Any]) -> bool:
    """Whether a row is in verl's layout: a chat-message `prompt` and a `reward_model` struct."""
    return isinstance(row.get("reward_model"), dict) and is_chat_messages(row.get("prompt"))


def verl_extra(row: dict[str, Any]) -> dict[str, Any]:
    """The fields of a verl row that a writer needs to rebuild it, original types kept (`index` may be an
    int, as gsm8k.py writes it, or a string, as DAPO-Math-17k ships it)."""
    reward_model = row.get("reward_model") or {}
    extra_info = row.get("extra_info") or {}
    return {
        "data_source": row.get("data_source"),
        "ability": row.get("ability"),
        "reward_style": reward_model.get("style"),
        "index": extra_info.get("index"),
        "split": extra_info.get("split"),
        "question": extra_info.get("question"),
    }
