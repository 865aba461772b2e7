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

from rlep.tasks.settings.verifier import VerifierConfig
from rlep.verifiers.equivalence import equations_equal, numeric_value, symbolic_equal
from rlep.verifiers.extract import Extraction, extract_answer, extract_final
from rlep.verifiers.fastpath import Structure, exact_equal, exact_structure, exact_value, structure_equal
from rlep.verifiers.normalize import Answer, normalize_answer
from rlep.verifiers.strict import verl_boxed_answer, verl_equivalent
from rlep.verifiers.verdict import Reason

_MARKED_GOLD = re.compile(r"\\boxed|\\fbox|(?<!\\)\$|\\\(|\\\[")
_PYTHON_LOOKING = re.compile(r"__|\b(?:import|lambda|exec|eval|getattr|globals|locals|compile|open)\b")
_MAX_NESTING = 64
_COMMAND = re.compile(r"\\[A-Za-z]+")
_LETTER = re.compile(r"[A-Za-z]")
_OPENERS, _CLOSERS = "([{", ")]}"


@lru_cache(maxsize=16384)
def prepare_gold(gold: str) -> Answer:
    """The normalised gold answer. Cached per worker."""
    # A gold written as a response (a dataset's solution, or Math-Verify's `$...$` golds) is read with
    # the response's extraction rules, minus the last-number fallback; a bare gold answer is used whole.
    marked = _MARKED_GOLD.search(gold) is not None
    extracted = extract_answer(gold, fallback_last_number=False) if marked else None
    return normalize_answer(extracted if extracted is not None else gold)


def judge(response: str, gold: str, config: VerifierConfig) -> tuple[bool, str | None, Reason]:
    """(correct, extracted answer, reason) for one response; exceptions are left to the caller."""
    return decide(find_answer(response, config), gold, config)


def find_answer(response: str, config: VerifierConfig) -> Extraction:
    """The extracted answer (see VerifierConfig.answer_format), cut to `max_answer_chars + 1`
    characters so that an oversized one is recognisable (and cheap to send back) without carrying it
    whole."""
    if config.answer_format == "boxed":
        found = Extraction(verl_boxed_answer(response))
    else:
        found = extract_final(response, fallback_last_number=config.fallback_last_number)
    limit = config.max_answer_chars + 1
    return Extraction(
        None if found.answer is None else found.answer[:limit],
        None if found.last_box is None else found.last_box[:limit],
    )


def decide(found: Extraction, gold: str, config: VerifierConfig) -> tuple[bool, str | None, Reason]:
    """(correct, extracted, reason) for an answer found by `find_answer`."""
    if found.answer is None:
        return False, None, "no-answer"
    extracted = found.answer
    if len(extracted) > config.max_answer_chars:
        return False, extracted, "too-long"
    gold_answer = prepare_gold(gold)
    if found.last_box is not None and _shape(gold_answer.text) == "scalar":
        # Boxes joined into a list meet a single-valued gold: the last box is the final answer, as in
        # verl and math-verify. Writing more boxes earns nothing over writing the last one alone, and a
        # list still never equals one number when the gold is a list.
        extracted = found.last_box
    pred = normalize_answer(extracted)
    if not pred.text:
        return False, extracted, "no-answer"
    correct, reason = compare(gold_answer, pred, config.float_rounding)
    if correct and config.answer_format == "boxed" and not verl_equivalent(extracted, gold):
        return False, extracted, "not-equal"  # right, but verl's string check would score it 0
    return correct, extracted, reason


def compare(gold: Answer, pred: Answer, float_rounding: int) -> tuple[bool, Reason]:
    """(equal, reason) for two normalised answers: `equal`, `not-equal` or `parse-error`."""
    aligned = align_equations(gold, pred)
    if aligned is None:
        return False, "not-equal"
    gold, pred = aligned
    if _PYTHON_LOOKING.search(pred.text) or _nesting_depth(pred.text) > _MAX_NESTING:
        return False, "parse-error"
    gold_value, pred_value = exact_value(gold.text), exact_value(pred.text)
    if gold.approximate and not pred.approximate:
        close = approximation_matches(gold, gold_value, pred, pred_value)
        if close is not None:
            return close, "equal" if close else "not-equal"
    if gold_value is not None and pred_value is not None:
        return _decided(exact_equal(gold, gold_value, pred, pred_value))
    if gold_value is not None and unevaluated_arithmetic(pred.text):
        return False, "unevaluated"
    gold_structure, pred_structure = exact_structure(gold.text), exact_structure(pred.text)
    if not (gold.percent or pred.percent):
        if gold_structure and pred_structure:
            return _decided(structure_equal(gold_structure, pred_structure))
        # A list of two or more different numbers (set, tuple, interval) is never one number.
        if (_several(gold_structure) and pred_value is not None) or (
            _several(pred_structure) and gold_value is not None
        ):
            return False, "not-equal"
    if pred == gold:
        return True, "equal"
    shapes = {_shape(pred.text), _shape(gold.text)}
    if shapes == {"set", "tuple"}:
        return False, "not-equal"
    if shapes == {"list", "tuple"}:
        pred, gold = _read_as_tuple(pred, gold)
        if pred is None:
            return False, "not-equal"
    equal = symbolic_equal(gold, pred, float_rounding)
    if not equal and gold.equation and pred.equation:
        # Two equations that are not the same value after `x =` is dropped may still describe the same
        # solution set (`2x+4y=3` vs `y = -x/2 + 3/4`).
        equal = equations_equal(gold.equation, pred.equation) or equal
    if equal is None:
        return False, "parse-error"
    return _decided(equal)


# A binary + or - between two operands (not a sign: it follows a digit or a closing bracket), or a product
# other than scientific notation's `a \times 10^k`.
_SUM_OR_DIFFERENCE = re.compile(r"[\d.)}\]]\s*[+-]\s*[+-]?\s*[\d.({\\]")
_PRODUCT = re.compile(r"(?:\\times|\\cdot|\*)(?!\s*10\s*\^)")


def unevaluated_arithmetic(text: str) -> bool:
    """Whether a normalised answer is arithmetic still to be done (`11 + 24`, `5 \\times 7`, `2 - -3`).

    Asked only when the gold is a plain number: a model that restates the question's sum (`The final answer
    is 11 + 24`) is symbolically equal to the gold, but it has not answered; RL finds that in a few steps
    (docs/verifiers.md). A single fraction (`70/2`, `\\frac{7}{2}`), a mixed number, a power (`10^6`) and
    scientific notation (`3 \\times 10^{5}`) are number forms, not computations left undone."""
    return bool(_SUM_OR_DIFFERENCE.search(text) or _PRODUCT.search(text))


def align_equations(gold: Answer, pred: Answer) -> tuple[Answer, Answer] | None:
    """The two answers as they must be compared, given the left sides normalisation dropped; None when
    they differ already.

    A dropped left side (`Answer.label`) may be ignored only when the other side is a bare value: `x = 3`
    against `3`. Two equations are compared by their values only when their left sides are the same
    (`x = 3` and `x = 1+2`); otherwise they are compared whole, as equations, so `\\cos(x) = \\frac{42}{59}`
    is not `\\sin(x) = \\frac{42}{59}`, nor `AB = 5` `BC = 5`, nor `2x = 6` `x = 6` (while `2x = 6` and
    `x = 3` are the same equation). An equation whose left side names nothing (`2x = 6`) never equals a
    bare value (`6`): math-verify would compare its right side alone. In a prediction, a left side with
    no letter is a computation, and its right side the answer (`\\frac12 \\cdot 3 = \\frac32` against
    `\\frac32`); a gold such as `7 = 11a+c` stays an equation (as in math-verify). One pair of different
    left sides counts as the same name: a function and its value (`names_one_function`).
    """
    gold_equation, pred_equation = gold.equation is not None, pred.equation is not None
    if gold_equation and pred_equation:
        if gold.label == pred.label or names_one_function(gold, pred):
            return gold, pred
        return _whole(gold), _whole(pred)
    if gold_equation or pred_equation:
        side = gold if gold_equation else pred
        if side.label is None and side.text.count("=") == 1 and not _has_top_level_comma(side.text):
            left, right = (part.strip() for part in side.text.split("="))
            if side is gold or _LETTER.search(_COMMAND.sub("", left)) is not None or not right:
                return None
            # A computation (`\\frac{1}{2} \\cdot 3 = \\frac{3}{2}`): its result is the answer.
            return gold, Answer(right, pred.percent)
    return gold, pred


# `f(x)`: a function of one variable, named by one letter, in function notation.
_FUNCTION_LABEL = re.compile(r"([A-Za-z])\(([A-Za-z])\)")


def names_one_function(gold: Answer, pred: Answer) -> bool:
    """Whether the left sides of two equations name the same function's value, so that their right sides
    are the answers: `f(x) = 2x+3` and `y = 2x + 3`, `y(x) = ...` and `y = ...`.

    One left side is a function of one variable in function notation (`f(x)`); the other is `y`, the
    usual name of a function's value, or the function's own letter. That name must not be the function's
    variable (`f(y) = 2y+3` against `y = 2y+3`) and must appear in neither right side (`y = 2x + y` is an
    equation in `y`, not a definition). Other pairs (`f(x)` and `g(x)`, `\\sin(x)` and `y`, `x` and `y`,
    `z` and `f(x)`) keep the equation rule: math-verify compares all of these as different equations.
    """
    for function_side, name_side in ((gold, pred), (pred, gold)):
        function = _FUNCTION_LABEL.fullmatch(function_side.label or "")
        if function is None:
            continue
        name, variable = name_side.label, function.group(2)
        if name in ("y", function.group(1)) and name != variable:
            return not any(name in _COMMAND.sub("", side.text) for side in (gold, pred))
    return False


def _whole(answer: Answer) -> Answer:
    return Answer(answer.equation or answer.text, answer.percent, equation=answer.equation)


_DECIMAL = re.compile(r"-?\d{1,40}(?:\.(\d{1,40}))?")


def approximation_matches(
    gold: Answer, gold_value: Fraction | None, pred: Answer, pred_value: Fraction | None
) -> bool | None:
    """For a gold written as an approximation (`\\approx 0.33`): whether `pred`'s value rounds to it at
    the gold's number of decimals (half away from zero); None when this rule does not apply (no plain
    decimal gold, a percent sign, or a prediction with no numeric value)."""
    decimal = _DECIMAL.fullmatch(gold.text)
    if decimal is None or gold_value is None or gold.percent or pred.percent:
        return None
    value = pred_value if pred_value is not None else numeric_value(pred.text)
    if value is None:
        return None
    digits = len(decimal.group(1) or "")
    scaled = abs(value) * 10**digits
    rounded = Fraction(int(scaled + Fraction(1, 2)), 10**digits)
    return (rounded if value >= 0 else -rounded) == gold_value


def _several(structure: Structure | None) -> bool:
    return structure is not None and len(set(structure.values)) >= 2


def _decided(equal: bool) -> tuple[bool, Reason]:
    return equal, "equal" if equal else "not-equal"


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
