"""Deciding one (response, gold) pair: extract, normalise, compare.

`judge` is what a worker process runs for each answer. The cheap steps come first so that most answers
never reach sympy: extraction and normalisation are string code, plain numbers are compared exactly
with `fractions.Fraction` (verifiers.fastpath), identical normalised strings are equal, and only the rest
goes to the symbolic comparison (verifiers.equivalence).

Two guards run before sympy sees an answer:

- Answers containing Python-looking text (`__`, `import`, `lambda`, ...) are a parse error. We never
  hand text to `eval`/`sympify`/`parse_expr`; this is defence in depth in case a library underneath does.
- Bracket nesting deeper than 64 is a parse error: the LaTeX grammar recurses per level, and real
  answers never nest that deep.

Shape policy on top of math-verify's: a set (`\\{1,2\\}`) never equals a tuple or an interval (`(1,2)`,
`[1,2]`), whatever the elements. A bare list (`1, 2`: brackets left out) is a set next to a set, and the
tuple it spells next to a parenthesised one (`\\sqrt2, 3` == `(\\sqrt2, 3)`, in order), never an interval
with a square bracket. Math-Verify compares a set with a tuple element by element as written; we do not,
because `\\{1,3\\}` and the open interval `(1,3)` are different answers.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache

from verifiers.config import VerifierConfig
from verifiers.equivalence import equations_equal, symbolic_equal
from verifiers.extract import extract_answer
from verifiers.fastpath import Structure, exact_equal, exact_structure, exact_value, structure_equal
from verifiers.normalize import Answer, normalize_answer
from verifiers.verdict import Reason

_MARKED_GOLD = re.compile(r"\\boxed|\\fbox|(?<!\\)\$|\\\(|\\\[")
_PYTHON_LOOKING = re.compile(r"__|\b(?:import|lambda|exec|eval|getattr|globals|locals|compile|open)\b")
_MAX_NESTING = 64
_OPENERS, _CLOSERS = "([{", ")]}"


@lru_cache(maxsize=16384)
def prepare_gold(gold: str) -> tuple[Answer, Fraction | None, Structure | None]:
    """The normalised gold answer, its exact value and its exact structure (or None). Cached per worker."""
    # A gold written as a response (a dataset's solution, or Math-Verify's `$...$` golds) is read with
    # the response's extraction rules, minus the last-number fallback; a bare gold answer is used whole.
    marked = _MARKED_GOLD.search(gold) is not None
    extracted = extract_answer(gold, fallback_last_number=False) if marked else None
    answer = normalize_answer(extracted if extracted is not None else gold)
    return answer, exact_value(answer.text), exact_structure(answer.text)


def judge(response: str, gold: str, config: VerifierConfig) -> tuple[bool, str | None, Reason]:
    """(correct, extracted answer, reason) for one response; exceptions are left to the caller."""
    return decide(find_answer(response, config), gold, config)


def find_answer(response: str, config: VerifierConfig) -> str | None:
    """The extracted answer, cut to `max_answer_chars + 1` characters so that an oversized one is
    recognisable (and cheap to send back) without carrying it whole."""
    extracted = extract_answer(response, fallback_last_number=config.fallback_last_number)
    return None if extracted is None else extracted[: config.max_answer_chars + 1]


def decide(extracted: str | None, gold: str, config: VerifierConfig) -> tuple[bool, str | None, Reason]:
    """(correct, extracted, reason) for an answer already extracted by `find_answer`."""
    if extracted is None:
        return False, None, "no-answer"
    if len(extracted) > config.max_answer_chars:
        return False, extracted, "too-long"
    pred = normalize_answer(extracted)
    if not pred.text:
        return False, extracted, "no-answer"
    gold_answer, gold_value, gold_structure = prepare_gold(gold)
    pred_value = exact_value(pred.text)
    if gold_value is not None and pred_value is not None:
        return _decided(exact_equal(gold_answer, gold_value, pred, pred_value), extracted)
    pred_structure = exact_structure(pred.text)
    if not (gold_answer.percent or pred.percent):
        if gold_structure and pred_structure:
            return _decided(structure_equal(gold_structure, pred_structure), extracted)
        # A list of two or more different numbers (set, tuple, interval) is never one number.
        if (_several(gold_structure) and pred_value is not None) or (_several(pred_structure) and gold_value is not None):
            return False, extracted, "not-equal"
    if pred == gold_answer:
        return True, extracted, "equal"
    if _PYTHON_LOOKING.search(pred.text) or _nesting_depth(pred.text) > _MAX_NESTING:
        return False, extracted, "parse-error"
    shapes = {_shape(pred.text), _shape(gold_answer.text)}
    if shapes == {"set", "tuple"}:
        return False, extracted, "not-equal"
    if shapes == {"list", "tuple"}:
        pred, gold_answer = _read_as_tuple(pred, gold_answer)
        if pred is None:
            return False, extracted, "not-equal"
    equal = symbolic_equal(gold_answer, pred, config.float_rounding)
    if not equal and gold_answer.equation and pred.equation:
        # Two equations that are not the same value after `x =` is dropped may still describe the same
        # solution set (`2x+4y=3` vs `y = -x/2 + 3/4`).
        equal = equations_equal(gold_answer.equation, pred.equation) or equal
    if equal is None:
        return False, extracted, "parse-error"
    return _decided(equal, extracted)


def _several(structure: Structure | None) -> bool:
    return structure is not None and len(set(structure.values)) >= 2


def _decided(equal: bool, extracted: str) -> tuple[bool, str, Reason]:
    return equal, extracted, "equal" if equal else "not-equal"


def _nesting_depth(text: str) -> int:
    depth = deepest = 0
    for char in text:
        if char in _OPENERS:
            depth += 1
            deepest = max(deepest, depth)
        elif char in _CLOSERS:
            depth = max(depth - 1, 0)
    return deepest


def _shape(text: str) -> str:
    """`set` for `\\{...\\}`, `tuple` for a bracketed comma list, `list` for a bare one, else `scalar`."""
    if text.startswith("\\{") and text.endswith("\\}"):
        return "set"
    bracketed = text[:1] in "([" and text[-1:] in ")]"
    inner = text[1:-1] if bracketed else text
    if not _has_top_level_comma(inner):
        return "scalar"
    return "tuple" if bracketed else "list"


def _read_as_tuple(pred: Answer, gold: Answer) -> tuple[Answer | None, Answer]:
    """The bare list of the pair wrapped in parentheses when the other side is a parenthesised tuple;
    (None, gold) when the other side has a square bracket (an interval, never a bare list)."""
    tuple_side = gold if _shape(gold.text) == "tuple" else pred
    if tuple_side.text[0] + tuple_side.text[-1] != "()":
        return None, gold
    if tuple_side is gold:
        return Answer(f"({pred.text})", pred.percent, pred.equation), gold
    return pred, Answer(f"({gold.text})", gold.percent, gold.equation)


def _has_top_level_comma(text: str) -> bool:
    depth = 0
    for char in text:
        if char in _OPENERS:
            depth += 1
        elif char in _CLOSERS:
            depth -= 1
            if depth < 0:
                # `(1,2)\cup(3,4)`: the outer brackets were not one group, so this is no plain list.
                return False
        elif char == "," and depth == 0:
            return True
    return False
