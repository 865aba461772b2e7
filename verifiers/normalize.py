"""Rewriting an extracted answer (or a gold answer) into a canonical LaTeX-ish string.

Both sides of a comparison go through `normalize_answer`, so every rule here is symmetric. The input is
an extracted answer, already bounded by `max_answer_chars`; every regex is linear on it.

Policies (documented in docs/verifiers.md):

- Unicode: NFKC folding, so full-width digits count (`１２` -> `12`); superscript digits become powers
  (`x²` -> `x^{2}`); `−` is a minus sign; `π √ ∞ × ÷ ·` become their LaTeX commands.
- Decoration dropped: math delimiters (`$`, `\\(`, `\\[`), `\\displaystyle`, `\\left`/`\\right`,
  LaTeX spacing, a final period.
- Thousands separators (`1,234`, `1{,}234`, `1\\,234`, `1 234`) are removed only when the whole answer is
  one such number; `1,2` stays a list.
- Degrees (`^\\circ`, `°`, `\\degree`) and currency (`\\$`, `€`, `£`, `¥`, `₹`) are dropped, so
  `30^\\circ` == `30` (no conversion to radians) and `\\$5` == `5`.
- A percent sign is removed and remembered (`percent=True`); the comparison then accepts either reading
  (`50\\%` == `50` and `50\\%` == `0.5`).
- Units: a `\\text{...}`/`\\mathrm{...}`/`\\mbox{...}` group of words, or trailing words of two or more
  letters separated by a space, after a number or a closing brace is dropped (`5\\text{ cm}`,
  `12 apples`). A single letter is never dropped (`2 x` keeps its `x`).
- `x = 3` -> `3`: a leading left-hand side that names the answer is dropped: a single variable, a tuple
  of variables (`(p,q) = (3,2)`) or an expression of letters only (`\\frac{NO}{BO} = \\frac12`,
  `V_1:V_2 = 11:21`); in a chain `x = 1+2 = 3` the last part is kept. Numbered solutions of one name
  (`x_1 = a, x_2 = b`) become the list `a,b`; other answers with a comma (`x=1, y=2`) are left whole
  for the symbolic comparison. The whole equation (`Answer.equation`) and the dropped left side
  (`Answer.label`) are kept aside: verifiers.judge ignores the left side only against a bare value, and
  compares two equations with different left sides whole (`\\cos(x) = a` is not `\\sin(x) = a`), unless they
  name one function (`f(x) = 2x+3` and `y = 2x+3`).
- A whole `\\text{...}`/`\\mathrm{...}` answer is unwrapped (`\\text{E}` == `E`), a choice `(B)` is `B`,
  a whole `{...}` group is its content (`{1,2}` is the list `1,2`), and answers of three or more letters
  and spaces compare case-insensitively (`Even` == `even`). `and`/`or` between items are commas.
- `\\!` (a negative space, used in `11,\\!111`) is removed; `\\sqrt3` -> `\\sqrt{3}`; `\\cfrac` -> `\\frac`.
- Relations, `\\approx`, `x \\in S` and matrices: see verifiers.relations.
- `\\dfrac`, `\\tfrac` -> `\\frac`, and `\\frac34` -> `\\frac{3}{4}`.
- Mixed numbers: an integer directly followed by a proper fraction of integers is their sum:
  `2\\frac12` and `2 1/2` both mean 5/2 (written `(2+\\frac{1}{2})`). An improper fraction after an
  integer (`2\\frac32`) is left as LaTeX reads it, a product.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

from rlep.verifiers.extract import last_boxed
from rlep.verifiers.relations import (
    cut_approximation,
    drop_membership,
    inequality_as_interval,
    unify_matrices,
    unify_relations,
)


@dataclass(frozen=True, slots=True)
class Answer:
    """A normalised answer: its text, and whether a percent sign was removed from it.

    The fields after `percent` record what normalisation took off, for the comparison rules of
    verifiers.judge; they are not part of equality, so `x = 3` and `3` are still the same Answer.
    """

    text: str
    percent: bool = False
    # The whole equation when the answer was one (`y = 2x+1`, `2x+4y=3`), for the equation rule.
    equation: str | None = field(default=None, compare=False)
    # The left side dropped from `text` (`x` of `x = 3`, `\sin(x)` of `\sin(x) = \frac12`), without spaces.
    label: str | None = field(default=None, compare=False)
    # True when only an approximation was written (`\approx 0.33`, `x \approx 11`).
    approximate: bool = field(default=False, compare=False)


_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻", "0123456789-")
_SUPERSCRIPT_RUN = re.compile(r"[⁰¹²³⁴⁵⁶⁷⁸⁹⁻]+")
_SYMBOLS = {
    "−": "-",
    "–": "-",
    "π": "\\pi ",
    "√": "\\sqrt ",
    "∞": "\\infty ",
    "×": "\\times ",
    "÷": "\\div ",
    "·": "\\cdot ",
    "⁄": "/",
}
_SYMBOL = re.compile("|".join(map(re.escape, _SYMBOLS)))
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_DELIMITERS = (("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
_SIZING = re.compile(r"\\(?:left|right|bigl|bigr|Bigl|Bigr|big|Big|biggl|biggr|bigg|Bigg)(?![A-Za-z])\.?")
# `\\\\` (a matrix row break) is matched first so that `\\\\ 0` is not read as a `\\ ` space.
_SPACING = re.compile(r"\\\\|\\[,;: ]|\\q?quad(?![A-Za-z])|~")
# `7, -2, \text{ and } -5`: a comma before the word belongs to it.
_CONJUNCTION = re.compile(r"\s*,?\s*\\text\{\s*(?:and|or)\s*\}\s*|,?\s+(?:and|or)\s+")
_NEGATIVE_SPACE = re.compile(r"\\!\s*")
_WHOLE_TEXT = re.compile(r"\\(?:text|textrm|textnormal|textbf|textit|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
_CHOICE = re.compile(r"\(([A-Ea-e])\)")
_WORDS = re.compile(r"[A-Za-z][A-Za-z ]+[A-Za-z]")
_SQRT_DIGIT = re.compile(r"\\sqrt\s*(\d)")
_TUPLE_LHS = re.compile(r"^\s*\(\s*[A-Za-z](?:\s*,\s*[A-Za-z])+\s*\)\s*=(?!=)")
_LETTERS_LHS = re.compile(r"^[^=\d]*[A-Za-z][^=\d]*=(?!=)")
_SUBSCRIPT = re.compile(r"_\{?[A-Za-z0-9]+\}?")
_DISPLAYSTYLE = re.compile(r"\\(?:displaystyle|textstyle)(?![A-Za-z])")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\circ(?![A-Za-z])|°|\\degree(?![A-Za-z])|\\text\{\s*degrees?\s*\}")
_CURRENCY = re.compile(r"\\\$|\$|€|£|¥|₹|\\euro(?![A-Za-z])|\\pounds(?![A-Za-z])")
_PERCENT = re.compile(r"\\%|%|\s*\\text\{\s*percent\s*\}|\s+percent\b")
_UNIT_POWER = r"(?:\^\{?[23]\}?)?"  # cm^2, m^{3}
_TEXT_GROUP = re.compile(
    r"\\(?:text|textrm|textnormal|textbf|textit|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}" + _UNIT_POWER
)
_UNIT_WORDS = re.compile(rf"\s*[A-Za-z]{{2,}}{_UNIT_POWER}(?:[\s.]+[A-Za-z]{{2,}}{_UNIT_POWER})*\s*")
_FRAC_NAME = re.compile(r"\\[dtc]frac(?![A-Za-z])")
_FRAC_DIGIT_ARGS = re.compile(r"\\frac\s*(\d)\s*(\d)|\\frac\s*(\d)\s*(?=\{)|\\frac\s*(\{[^{}]*\})\s*(\d)")
# Digit counts are capped so that int() never meets Python's 4,300-digit conversion limit.
_MIXED_LATEX = re.compile(r"(?<![\d.}^_])(\d{1,40})\s*\\frac\{(\d{1,40})\}\{(\d{1,40})\}")
_MIXED_SLASH = re.compile(r"^(-?)(\d{1,40})\s+(\d{1,40})\s*/\s*(\d{1,40})$")
_THOUSANDS = re.compile(r"^-?\d{1,3}(?:(?:,|\{,\}|\s)\d{3})+(?:\.\d+)?$")
_THOUSANDS_SEPARATOR = re.compile(r",|\{,\}|\s")
_VARIABLE_LHS = re.compile(r"^\s*(?:[A-Za-z]|\\[A-Za-z]+)(?:_\{?[A-Za-z0-9]+\}?)?\s*=(?!=)")
_WHITESPACE = re.compile(r"\s+")
_INDEXED_LABEL = re.compile(r"\s*([A-Za-z])_\{?([A-Za-z0-9]{1,8})\}?\s*=(?!=)")
_RELATION_WORD = re.compile(r"\\(?:leq|geq|neq)|[<>]")


def normalize_answer(raw: str) -> Answer:
    """`raw` rewritten by the rules in this module's docstring."""
    text = _fold_unicode(raw)
    text = _strip_delimiters(text)
    whole_box = last_boxed(text) if text.startswith(("\\boxed", "\\fbox")) else None
    if whole_box is not None:
        text = whole_box
    text = _DISPLAYSTYLE.sub("", text)
    text = _SIZING.sub("", text)
    text = _NEGATIVE_SPACE.sub("", text)
    text = _SPACING.sub(lambda space: space.group() if space.group() == "\\\\" else " ", text)
    text = _DEGREES.sub("", text)
    text = _CONJUNCTION.sub(",", text)
    text, percent = _strip_percent(text)
    text = _CURRENCY.sub("", text)
    text = _drop_units(text)
    # A stray trailing backslash (`5\` in a gold) is no command: it would make the answer unreadable.
    text = _WHITESPACE.sub(" ", text).strip().rstrip("\\").strip().rstrip(".").strip()
    text = _unwrap_whole_group(text)
    text = unify_matrices(unify_relations(text))
    text, approximate = cut_approximation(text)
    text = drop_membership(text)
    equation = _spelled(text) if "=" in text else None
    label, text = _strip_variable(text)
    text = _spelled(inequality_as_interval(text))
    return Answer(text=text, percent=percent, equation=equation, label=label, approximate=approximate)


def _spelled(text: str) -> str:
    """One spelling of numbers, fractions, radicals and mixed numbers."""
    if _THOUSANDS.match(text):
        text = _THOUSANDS_SEPARATOR.sub("", text)
    text = _FRAC_NAME.sub("\\\\frac", text)
    text = _FRAC_DIGIT_ARGS.sub(_brace_frac_args, text)
    text = _SQRT_DIGIT.sub(r"\\sqrt{\1}", text)
    return _mixed_numbers(text)


def _fold_unicode(text: str) -> str:
    # Superscripts first: NFKC would turn `x²` into `x2`.
    text = _SUPERSCRIPT_RUN.sub(lambda run: "^{" + run.group().translate(_SUPERSCRIPTS) + "}", text)
    text = unicodedata.normalize("NFKC", text)
    text = _SYMBOL.sub(lambda symbol: _SYMBOLS[symbol.group()], text)
    return _CONTROL.sub(" ", text)


def _strip_delimiters(text: str) -> str:
    text = text.strip()
    changed = True
    while changed:
        changed = False
        for opener, closer in _DELIMITERS:
            if len(text) >= len(opener) + len(closer) and text.startswith(opener) and text.endswith(closer):
                text = text[len(opener) : len(text) - len(closer)].strip()
                changed = True
    return text


def _strip_percent(text: str) -> tuple[str, bool]:
    stripped, count = _PERCENT.subn("", text)
    return stripped, count > 0


def _drop_units(text: str) -> str:
    """Remove unit words that follow a number or a closing brace; unwrap other text groups."""

    def unit_or_text(group: re.Match) -> str:
        before = text[: group.start()].rstrip()
        if before and (before[-1].isdigit() or before[-1] in "})") and _UNIT_WORDS.fullmatch(group.group(1)):
            return " "
        return group.group()

    text = _TEXT_GROUP.sub(unit_or_text, text)
    head, _, tail = text.rstrip().rpartition(" ")
    while head and _UNIT_WORDS.fullmatch(tail) and (head[-1].isdigit() or head[-1] in "})"):
        text = head
        head, _, tail = text.rstrip().rpartition(" ")
    return text


def _unwrap_whole_group(text: str) -> str:
    """`\\text{E}` -> `E`, `(B)` -> `B`, `{1,2}` -> `1,2`; answers of words compare case-insensitively."""
    whole = _WHOLE_TEXT.fullmatch(text)
    if whole is not None:
        text = whole.group(1).strip()
    choice = _CHOICE.fullmatch(text)
    if choice is not None:
        text = choice.group(1)
    if text.startswith("{") and text.endswith("}") and "{" not in text[1:-1] and "}" not in text[1:-1]:
        text = text[1:-1].strip()
    if len(text) >= 3 and _WORDS.fullmatch(text):
        text = text.lower()
    return text


def _strip_variable(text: str) -> tuple[str | None, str]:
    """(the dropped left-hand side, the rest): a left side that names what the answer is (`x =`,
    `(p,q) =`, `\\frac{NO}{BO} =`, letters only) is dropped; (None, text) when there is none. Whether
    the name may be ignored is decided by the comparison (verifiers.judge), which sees both sides."""
    if _TUPLE_LHS.match(text):
        return _label(text.split("=", 1)[0]), text.rsplit("=", 1)[1].strip()
    if "," in text:
        return _strip_indexed_labels(text)
    lhs = _VARIABLE_LHS.match(text)
    if lhs is None:
        letters_lhs = _LETTERS_LHS.match(_SUBSCRIPT.sub("", text))
        if letters_lhs is None or _RELATION_WORD.search(text):
            return None, text
    return _label(text.split("=", 1)[0]), text.rsplit("=", 1)[1].strip()


def _label(left: str) -> str:
    return _WHITESPACE.sub("", left)


def _strip_indexed_labels(text: str) -> tuple[str | None, str]:
    """`x_1 = a, x_2 = b` -> (`x_`, `a,b`): solutions numbered with one name are a list of values (a
    set, as their order carries no meaning). Different names (`x=1, y=2`) are left whole."""
    elements = _top_level_split(text)
    labels = [_INDEXED_LABEL.match(element) for element in elements]
    if len(elements) < 2 or None in labels:
        return None, text
    names = {label.group(1) for label in labels}
    indices = [label.group(2) for label in labels]
    if len(names) != 1 or len(set(indices)) != len(indices):
        return None, text
    values = ",".join(element[label.end() :].strip() for element, label in zip(elements, labels, strict=True))
    return f"{names.pop()}_", values


def _top_level_split(text: str) -> list[str]:
    elements, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            elements.append(text[start:index])
            start = index + 1
    elements.append(text[start:])
    return elements


def _brace_frac_args(frac: re.Match) -> str:
    a, b, c, d, e = frac.groups()
    if a is not None:
        return f"\\frac{{{a}}}{{{b}}}"
    if c is not None:
        return f"\\frac{{{c}}}"
    return f"\\frac{d}{{{e}}}"


def _mixed_numbers(text: str) -> str:
    slash = _MIXED_SLASH.match(text)
    if slash is not None:
        sign, whole, numerator, denominator = slash.groups()
        if int(numerator) < int(denominator):
            return f"{sign}({whole}+\\frac{{{numerator}}}{{{denominator}}})"
        return text

    def mixed(number: re.Match) -> str:
        whole, numerator, denominator = number.groups()
        if int(numerator) < int(denominator):
            return f"({whole}+\\frac{{{numerator}}}{{{denominator}}})"
        return number.group()

    return _MIXED_LATEX.sub(mixed, text)
