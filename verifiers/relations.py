"""Relations in answers: inequalities become intervals, `\\approx` chains are cut, matrices get one spelling.

Called by verifiers.normalize on both sides of a comparison, so each rule is symmetric. Pure string
code on an answer already bounded by `max_answer_chars`; no regex here backtracks super-linearly.

Policies (docs/verifiers.md):

- Spellings: `>=`, `\\ge`, `\\geqslant` -> `\\geq`; `<=`, `\\le`, `\\leqslant` -> `\\leq`; `!=`, `\\ne` -> `\\neq`;
  `\\gt`, `\\lt` -> `>`, `<`.
- An inequality in one variable is its solution set, written as an interval: `x \\geq 5`, `5 \\leq x` and
  `[5, \\infty)` are the same answer; `-x > -1` is `x < 1`; `a < x \\leq b` is `(a, b]`; `x \\neq 3` is
  `(-\\infty,3) \\cup (3,\\infty)`. The variable's name is dropped, as `x = 3` drops it. `x \\in S` is `S`.
- `\\approx`: the exact part before `\\approx` is the answer when one is written (`x = 1/3 \\approx 0.33`
  and `\\frac13 \\approx 0.33` are `1/3`); when only a name stands before it (`x \\approx 11`) or nothing
  does, the approximation is, and the answer is marked approximate (verifiers.judge then accepts, for
  such a gold, a value that rounds to it).
- Matrices: `pmatrix`, `bmatrix`, `Bmatrix`, `matrix`, `smallmatrix` and `[\\begin{array}{..}...\\end{array}]`
  are one spelling (`pmatrix`); `vmatrix` (a determinant) is left alone.
"""

from __future__ import annotations

import re

_SPELLINGS = (
    (re.compile(r">=|\\geqslant(?![A-Za-z])|\\geq?(?![A-Za-z])"), "\\\\geq "),
    (re.compile(r"<=|\\leqslant(?![A-Za-z])|\\leq?(?![A-Za-z])"), "\\\\leq "),
    (re.compile(r"!=|\\neq?(?![A-Za-z])"), "\\\\neq "),
    (re.compile(r"\\gt(?![A-Za-z])"), ">"),
    (re.compile(r"\\lt(?![A-Za-z])"), "<"),
)
_RELATION = re.compile(r"\\leq |\\geq |\\neq |<|>")
_VARIABLE = re.compile(r"(-?)\s*((?:[A-Za-z]|\\[A-Za-z]+)(?:_\{?[A-Za-z0-9]+\}?)?|[A-Za-z]\([A-Za-z]\))")
_MEMBERSHIP = re.compile(r"^\s*(?:[A-Za-z]|\\[A-Za-z]+)(?:_\{?[A-Za-z0-9]+\}?)?\s*\\in(?![A-Za-z])\s*")
# A bare name before `\\approx` (`x \\approx 11`) names the value; anything else is the exact value.
_NAME = re.compile(r"(?:[A-Za-z]|\\[A-Za-z]+)(?:_\{?[A-Za-z0-9]+\}?)?")
_CONSTANTS = ("\\pi", "\\infty")
_LETTER = re.compile(r"(?<!\\)\b[A-Za-z]\b|[A-Za-z](?=\()")
_FLIP = {"<": ">", ">": "<", "\\leq ": "\\geq ", "\\geq ": "\\leq ", "\\neq ": "\\neq "}
_MATRIX_BEGIN = re.compile(r"\\begin\{(?:p|b|B|small)?matrix\}|[\[(]\s*\\begin\{array\}\{[^{}]*\}")
_MATRIX_END = re.compile(r"\\end\{(?:p|b|B|small)?matrix\}|\\end\{array\}\s*[\])]")
_MATRIX_SPACES = re.compile(r"\s*(&|\\\\)\s*")


def unify_relations(text: str) -> str:
    """One spelling per relation symbol."""
    for pattern, replacement in _SPELLINGS:
        text = pattern.sub(replacement, text)
    return text


def unify_matrices(text: str) -> str:
    """Every matrix environment written as `pmatrix`, with no spaces around `&` and `\\\\`."""
    if "\\begin" not in text:
        return text
    text = _MATRIX_BEGIN.sub(r"\\begin{pmatrix}", text)
    text = _MATRIX_END.sub(r"\\end{pmatrix}", text)
    return _MATRIX_SPACES.sub(r"\1", text)


def cut_approximation(text: str) -> tuple[str, bool]:
    """(the exact part of an `\\approx` chain, whether only an approximation was written): see the
    module docstring."""
    if "\\approx" not in text:
        return text, False
    before, _, after = text.partition("\\approx")
    before = before.strip()
    name = _NAME.fullmatch(before.rstrip("=").strip())
    if before and (name is None or name.group() in _CONSTANTS):
        return before, False
    return after.rpartition("\\approx")[2].strip(), True


def drop_membership(text: str) -> str:
    """`x \\in [1,2]` -> `[1,2]`."""
    membership = _MEMBERSHIP.match(text)
    return text if membership is None else text[membership.end() :]


def inequality_as_interval(text: str) -> str:
    """`text` as an interval if it is an inequality in one variable with constant bounds, else `text`."""
    parts = _RELATION.split(text)
    relations = _RELATION.findall(text)
    if not relations or len(relations) > 2 or any(not part.strip() for part in parts):
        return text
    parts = [part.strip() for part in parts]
    if len(relations) == 1:
        return _one_sided(parts[0], relations[0], parts[1]) or text
    low, first, variable, second, high = parts[0], relations[0], parts[1], relations[1], parts[2]
    if _constant(low) and _constant(high) and _bare_variable(variable):
        if first in ("<", "\\leq ") and second in ("<", "\\leq "):
            return _bounded(low, first, second, high)
        if first in (">", "\\geq ") and second in (">", "\\geq "):
            return _bounded(high, _FLIP[second], _FLIP[first], low)
    return text


def _one_sided(left: str, relation: str, right: str) -> str | None:
    if _constant(left) and not _constant(right):
        left, relation, right = right, _FLIP[relation], left
    variable = _VARIABLE.fullmatch(left)
    if variable is None or not _constant(right):
        return None
    if variable.group(1) == "-":
        relation, right = _FLIP[relation], _negated(right)
    if relation == "<":
        return f"(-\\infty,{right})"
    if relation == "\\leq ":
        return f"(-\\infty,{right}]"
    if relation == ">":
        return f"({right},\\infty)"
    if relation == "\\geq ":
        return f"[{right},\\infty)"
    return f"(-\\infty,{right})\\cup({right},\\infty)"


def _bounded(low: str, first: str, second: str, high: str) -> str:
    return ("(" if first == "<" else "[") + f"{low},{high}" + (")" if second == "<" else "]")


def _bare_variable(text: str) -> bool:
    variable = _VARIABLE.fullmatch(text)
    return variable is not None and variable.group(1) == ""


def _constant(text: str) -> bool:
    """No free single-letter variable in `text` (LaTeX commands such as `\\sqrt`, `\\pi` are fine)."""
    return bool(text) and _LETTER.search(text) is None and "=" not in text


def _negated(text: str) -> str:
    if text.startswith("-") and not any(sign in text[1:] for sign in "+-"):
        return text[1:]
    return f"-{text}" if not any(sign in text for sign in "+-") else f"-({text})"
