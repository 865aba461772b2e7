"""Gold answers and levels as the data sets write them, read by the conventions of the projects that made them.

Each reader follows one named project, so a gold read here equals the gold a verl run of the same file
would score against:

- `last_boxed_answer` (MATH, NuminaMath solutions): the content of the LAST `\\boxed{...}` (or `\\fbox{...}`),
  braces balanced, as verl's `last_boxed_only_string` + `remove_boxed` (verl/utils/reward_score/math_reward.py,
  used by examples/data_preprocess/math_dataset.py; the functions come from the MATH authors' code). A
  solution that boxes several values in turn gives its last box, not a list.
- `gsm8k_final_answer` (GSM8K `answer`): the number after `####` with its thousands commas removed
  (`#### 1,200` -> `1200`), as verl's examples/data_preprocess/gsm8k.py. Where verl's pattern would cut a
  non-number short (`#### 1/2` -> `1`), the whole text after the marker is kept instead.
- `difficulty_level`: MATH writes `level` as the string `"Level 3"`; `"Level ?"` (a few MATH test rows)
  and anything else that names no level is 0, rlep's "unknown".
- `NO_ANSWER_VALUES`: placeholders NuminaMath-1.5 writes in `answer` where a problem has no checkable
  answer (`proof` for proofs, `notfound` where none was extracted); they are missing answers, not golds.
"""

from __future__ import annotations

import re
from typing import Any

NO_ANSWER_VALUES = ("proof", "notfound")

_BOX_COMMANDS = ("\\boxed", "\\fbox")
_THOUSANDS = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_LEVEL = re.compile(r"(?:level\s*)?(\d+)", re.IGNORECASE)


def last_boxed_answer(solution: str) -> str | None:
    """The content of the last `\\boxed{...}` in `solution` (`\\fbox{...}` when there is no `\\boxed`), or None.

    `\\boxed 5$` (a box written without braces) gives the text up to the next `$`, as verl reads it.
    An unclosed last box gives None: that row has no readable gold.
    """
    for command in _BOX_COMMANDS:
        start = solution.rfind(command)
        if start >= 0:
            break
    else:
        return None
    rest = solution[start + len(command) :]
    if rest.startswith(" "):  # `\boxed 5`: no braces, the answer runs to the end of the math span
        answer = rest[1:].split("$", 1)[0].strip()
        return answer or None
    opening = rest.find("{")
    if opening < 0 or rest[:opening].strip():
        return None
    depth = 0
    for position in range(opening, len(rest)):
        if rest[position] == "{":
            depth += 1
        elif rest[position] == "}":
            depth -= 1
            if depth == 0:
                answer = rest[opening + 1 : position].strip()
                return answer or None
    return None


def gsm8k_final_answer(solution: str) -> str | None:
    """The answer after the first `####` of a GSM8K solution (thousands commas removed), or None."""
    marker = solution.find("####")
    if marker < 0:
        return None
    answer = solution[marker + 4 :].split("\n", 1)[0].strip()
    if _THOUSANDS.fullmatch(answer):
        answer = answer.replace(",", "")
    return answer or None


def difficulty_level(value: Any) -> int:
    """A level column's value as a small integer (`3`, `"3"`, `"Level 3"` -> 3); 0 when it names none."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(0, value)
    if isinstance(value, float):
        return max(0, int(value)) if value.is_integer() else 0
    if isinstance(value, str):
        match = _LEVEL.fullmatch(value.strip())
        return int(match.group(1)) if match else 0
    return 0
