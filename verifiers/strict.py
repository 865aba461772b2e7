"""The strict answer format (`answer_format="boxed"`): the reading of verl's MATH scorer, restated.

An answer accepted in this mode is also given 1.0 by verl's rule-based MATH scorer
(`verl/utils/reward_score/math_reward.py`, formerly `math.py`, itself from lm-evaluation-harness's
hendrycks_math task), so a pool exported for verl does not carry "verified successes" that verl scores 0.
That scorer does three things, restated here from its behaviour (not its code):

1. `last_boxed_only_string`: the last `\\boxed` in the whole response (no `</think>` cut), its braces
   matched by counting `{` and `}` (escaped braces count too); when the response contains `\\boxed `
   (a space) anywhere, the text after the last `\\boxed ` up to the next `$` instead. With no `\\boxed`
   it looks for `\\fbox`, which step 2 then refuses. A box that never closes is no answer.
2. `remove_boxed`: the content, only if the string is `\\boxed{...}` or starts with `\\boxed `.
   Anything else (an `\\fbox`, `\\boxed` followed by something else) is an error, scored 0.
3. `is_equiv`: both strings rewritten by `strip_string` (below) and compared as strings; when the
   rewriting raises, the raw strings are compared instead.

So no answer phrase, no math span, no last number, and no joined boxes count in this mode; and a
right answer that verl's string rewriting does not recognise (`0.75` for `\\frac34`) is `not-equal`.
verifiers.judge asks both: rlep's own comparison and this one.
"""

from __future__ import annotations

_BOXED = "\\boxed"
_BOXED_SPACE = "\\boxed "
_BOXED_BRACE = "\\boxed{"


class _Unreadable(ValueError):
    """verl's rewriting raises on this string (then it compares the raw strings)."""


def verl_boxed_answer(response: str) -> str | None:
    """The answer verl's MATH scorer reads in `response` (steps 1 and 2), or None when it reads none."""
    if _BOXED_SPACE in response:
        return response.split(_BOXED_SPACE)[-1].split("$")[0]
    start = response.rfind(_BOXED)
    if start < 0:
        return None  # an `\fbox` alone: verl finds it, then refuses it in remove_boxed
    depth = 0
    for index in range(start, len(response)):
        char = response[index]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                box = response[start : index + 1]
                return box[len(_BOXED_BRACE) : -1] if box.startswith(_BOXED_BRACE) else None
    return None


def verl_equivalent(answer: str, gold: str) -> bool:
    """verl's `is_equiv(answer, gold)`: equal after its string rewriting, or equal as raw strings when
    that rewriting fails on either side."""
    try:
        return verl_rewrite(answer) == verl_rewrite(gold)
    except _Unreadable:
        return answer == gold


def verl_rewrite(text: str) -> str:
    """verl's `strip_string`, step by step; raises _Unreadable where it raises."""
    text = text.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    text = text.replace("tfrac", "frac").replace("dfrac", "frac")
    text = text.replace("\\left", "").replace("\\right", "")
    text = text.replace("^{\\circ}", "").replace("^\\circ", "")
    text = text.replace("\\$", "")
    if "\\text{ " in text:  # units on the right, written `\text{ cm}`; more than one is an error
        parts = text.split("\\text{ ")
        if len(parts) != 2:
            raise _Unreadable(text)
        text = parts[0]
    text = text.replace("\\\\%", "").replace("\\%", "")
    text = text.replace(" .", " 0.").replace("{.", "{0.")
    if not text:
        return text
    if text[0] == ".":
        text = "0" + text
    sides = text.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:  # `k = 3`: a short left side is dropped
        text = sides[1]
    text = _braced_sqrt(text).replace(" ", "")
    text = _braced_fracs(text)
    if text == "0.5":
        text = "\\frac{1}{2}"
    return _slash_as_frac(text)


def _braced_sqrt(text: str) -> str:
    """`\\sqrt3` -> `\\sqrt{3}`: the one character after `\\sqrt` is braced."""
    if "\\sqrt" not in text:
        return text
    first, *rest = text.split("\\sqrt")
    pieces = [first]
    for piece in rest:
        if not piece:
            raise _Unreadable(text)
        pieces.append("\\sqrt" + (piece if piece[0] == "{" else "{" + piece[0] + "}" + piece[1:]))
    return "".join(pieces)


def _braced_fracs(text: str) -> str:
    """`\\frac12` -> `\\frac{1}{2}`, `\\frac1{72}` -> `\\frac{1}{72}`; a `\\frac` with fewer than two
    characters after it leaves the whole string as it was."""
    first, *rest = text.split("\\frac")
    pieces = [first]
    for piece in rest:
        if not piece:
            raise _Unreadable(text)
        if piece[0] == "{":
            pieces.append("\\frac" + piece)
        elif len(piece) < 2:
            return text
        elif piece[1] != "{":
            pieces.append("\\frac{" + piece[0] + "}{" + piece[1] + "}" + piece[2:])
        else:
            pieces.append("\\frac{" + piece[0] + "}" + piece[1:])
    return "".join(pieces)


def _slash_as_frac(text: str) -> str:
    """`3/4` -> `\\frac{3}{4}` when both sides are integers written plainly (no sign `+`, no zero padding)."""
    sides = text.split("/")
    if len(sides) != 2:
        return text
    try:
        numerator, denominator = int(sides[0]), int(sides[1])
    except ValueError:
        return text
    if text != f"{numerator}/{denominator}":
        return text
    return f"\\frac{{{numerator}}}{{{denominator}}}"
