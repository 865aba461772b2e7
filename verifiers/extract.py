"""Finding the final answer in a model response.

Pure string code that runs in linear time in the response length (no regex here can backtrack
super-linearly), so a hostile response can only cost time proportional to its size, which the caller
bounds with `max_response_chars`.

Where the answer is looked for, in order:

1. If the response contains `</think>`, only the text after the last `</think>` is read; reasoning
   inside an unclosed `<think>` is read like any other text.
2. The last complete `\\boxed{...}` or `\\fbox{...}` (nested braces allowed, `\\boxed 5` too). "Last"
   means the box that closes last, so in `\\boxed{\\boxed{5}}` the outer box counts (and is unwrapped).
   A box whose braces never close (a truncated response) is skipped. Several boxes written one after
   the other, separated only by a connector (at most 32 characters, no digit, `=`, sentence end `.`,
   `:`, `?`, `!` or blank line, and at most three words besides `and`/`or`; a label such as `x_2 =`
   just before the next box is allowed), are one answer: their contents
   joined by commas (`\\boxed{1} and \\boxed{2}` -> `1,2`), which then compares as a list; a
   connector with a word of correction (`but`, `actually`, `wait`, `so`, ...) separates them, so in
   `\\boxed{7}, but actually \\boxed{42}` the answer is `42`. The last box is kept apart as well
   (`Extraction.last_box`): verifiers.judge uses it alone when the gold is a single value.
3. Otherwise, or when it comes after the last box, the latest answer phrase: `#### X` (GSM8K),
   `Answer: X` (DAPO, Minerva), or `the (final) answer is X`. The phrase runs to the end of its line, or to the end of
   the `$...$`,
   `\\(...\\)` or `\\[...\\]` it starts with, and stops at a sentence-ending period.
   A phrase that is prose with a number (`The largest $n$ is 34`) gives its last number.
4. Otherwise the last number written after the last math span (when `fallback_last_number` is on),
   else the content of the last math span: `$...$`, `$$...$$`, `\\(...\\)` or `\\[...\\]`
   (an escaped `\\$` is a dollar sign, not a delimiter; empty spans are skipped; inline spans, `$...$`
   and `\\(...\\)`, do not run across a line break, display spans may). Spans separated by a
   connector are joined as boxes are (`$1$ and $2$` -> `1,2`).
5. Otherwise, when `fallback_last_number` is on, the last number in the text (`-12`, `1,234.5`, `3/4`,
   `\\frac{3}{4}` with integer parts).

A number counts as written (rules 3, 4 and 5) only when it stands apart: no letter, digit, `_` or `.`
touches it on either side and no `-` or `/` joins it to a word. In `pytest-1`, `/tmp/x/12/canary`,
`abc123`, `123abc`, `1e5`, `x-1`, `2024-01-05` or `1.2.3` there is no number: a name, a path or an
expression is not an answer, and reading one gave an injection string a right answer (issue 34).
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass

THINK_CLOSE = "</think>"

_BOX_OPENER = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])\s*")
# Group braces and the escapes that are not group braces (`\{`, `\}`), plus `\\` so that the brace
# after a LaTeX line break still counts.
_BRACE_TOKEN = re.compile(r"\\[{}\\]|[{}]")
_UNBRACED_BOX_ARG = re.compile(r"[^\s$]+")
_MAX_CONNECTOR = 32
_LABEL = re.compile(r"(?:[A-Za-z]|\\[A-Za-z]+)(?:_\{?[A-Za-z0-9]{1,8}\}?)?\s*=\s*$")
_JOINING_WORDS = frozenset(("and", "or", "text", "quad", "qquad"))
_CONNECTOR_WORD = re.compile(r"[A-Za-z]+")
# Words that make a later box a correction of an earlier one, not a second item of a list.
_CORRECTION_WORDS = frozenset(
    (
        "but actually wait instead rather no not nope oops sorry hmm however mistake correction corrected "
        "correct recheck redo scratch so thus hence therefore final finally really oh"
    ).split()
)
_NOT_CONNECTOR = re.compile(r"[.:?!=\d]|\n\s*\n")
# Math delimiters; `\\` first so that an escaped backslash is not read as half of `\(`.
_MATH_DELIMITER = re.compile(r"\\\\|\\\$|\$\$|\$|\\[()\[\]]")
_SPAN_CLOSER = {"$$": "$$", "$": "$", "\\(": "\\)", "\\[": "\\]"}
_INLINE_OPENERS = ("$", "\\(")
_INLINE_MATH = re.compile(r"\$[^$]*\$")
_PROSE_WORD = re.compile(r"[A-Za-z]{2,}")
_ANCHOR = re.compile(r"####|\banswer(?:\*\*)?[ \t]{0,8}(?:is\b|:|：)", re.IGNORECASE)
_MATH_OPENERS = (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$"))
_SENTENCE_END = re.compile(r"\.(?:\s|$)")
# A number that may stand apart (see the module docstring): nothing of a word just before it, and no `-` or
# `/` joining it to one. What follows it is checked by `_last_written_number` on the whole match: a lookahead
# here would let the engine backtrack to a shorter number (`1,234x` would give `1`).
_LAST_NUMBER = re.compile(r"-?\\[dt]?frac\{-?\d+\}\{-?\d+\}|(?<![\w.])(?<!\w[-/])-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?")
_GLUED_AFTER = re.compile(r"\w|[-/.]\w")
# A `$` that closes inline math: not the escaped dollar sign `\$`.
_UNESCAPED_DOLLAR = re.compile(r"(?<!\\)\$")


@dataclass(frozen=True, slots=True)
class Extraction:
    """The final answer found in a response (None: nothing answer-like), and, when that answer joins
    several boxes (rule 2), the content of the last box alone."""

    answer: str | None
    last_box: str | None = None


def extract_answer(response: str, fallback_last_number: bool = True) -> str | None:
    """The final answer written in `response`, as raw text, or None if there is none.

    The rules are listed in this module's docstring; an empty box gives "" (an answer that says
    nothing), not None.
    """
    return extract_final(response, fallback_last_number).answer


def extract_final(response: str, fallback_last_number: bool = True) -> Extraction:
    """`extract_answer`, with the last box kept apart when several boxes were joined into one answer."""
    text = response.replace("\x00", "")
    think_end = text.rfind(THINK_CLOSE)
    if think_end >= 0:
        text = text[think_end + len(THINK_CLOSE) :]
    boxes = _outermost(_complete_boxes(text))
    anchor = _last_match(_ANCHOR, text)
    if boxes and (anchor is None or anchor.start() < boxes[-1][1]):
        joined = _joined_boxes(text, boxes)
        last = _unwrap(boxes[-1][2])
        return Extraction(joined, last if joined != last else None)
    phrase = last_answer_phrase(text)
    if phrase is not None:
        return Extraction(phrase)
    span, span_end = _last_math_span(text)
    if fallback_last_number:
        number = _last_written_number(text, span_end)
        if number is not None:
            return Extraction(number.group())
    return Extraction(span)


def _complete_boxes(text: str) -> list[tuple[int, int, str]]:
    """Every complete box of `text` as (start, end, content), `end` exclusive, in order of start."""
    openers = list(_BOX_OPENER.finditer(text))
    if not openers:
        return []
    closing = _matching_braces(text, openers[0].end())
    boxes = []
    for opener in openers:
        start = opener.end()
        if start < len(text) and text[start] == "{":
            end = closing.get(start)
            if end is None:
                continue
            boxes.append((opener.start(), end + 1, text[start + 1 : end]))
        else:
            argument = _UNBRACED_BOX_ARG.match(text, start)
            if argument is not None:
                boxes.append((opener.start(), argument.end(), argument.group()))
    return boxes


def _outermost(boxes: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    outer: list[tuple[int, int, str]] = []
    for box in boxes:
        if outer and box[0] < outer[-1][1]:
            if box[1] > outer[-1][1]:  # an unbraced box overlapping a braced one: keep the later end
                outer[-1] = box
            continue
        outer.append(box)
    return outer


def last_boxed(text: str) -> str | None:
    """The content of the box in `text` that closes last, unwrapped while it is itself a whole box."""
    boxes = _outermost(_complete_boxes(text))
    if not boxes:
        return None
    return _unwrap(boxes[-1][2])


def final_boxes(text: str) -> str | None:
    """The last box of `text`, joined by commas with the boxes written just before it (see rule 2)."""
    boxes = _outermost(_complete_boxes(text))
    return _joined_boxes(text, boxes) if boxes else None


def _joined_boxes(text: str, boxes: list[tuple[int, int, str]]) -> str:
    if not boxes[-1][2].strip():
        return ""  # an empty last box says nothing, whatever came before it
    group = [boxes[-1]]
    for box in reversed(boxes[:-1]):
        if not _is_connector(text[box[1] : group[-1][0]]):
            break
        group.append(box)
    contents = [_unwrap(box[2]) for box in reversed(group)]
    return ",".join(content for content in contents if content) if len(contents) > 1 else contents[0]


def _is_connector(separator: str, max_words: int = 3) -> bool:
    if len(separator) > 2 * _MAX_CONNECTOR:
        return False
    separator = _LABEL.sub(" ", separator)  # `\\boxed{2}, x_2 = \\boxed{3}`: the label names the next box
    if len(separator) > _MAX_CONNECTOR or _NOT_CONNECTOR.search(separator) is not None:
        return False
    words = [word for word in _CONNECTOR_WORD.findall(separator) if word not in _JOINING_WORDS]
    if any(word.lower() in _CORRECTION_WORDS for word in words):
        return False  # `\\boxed{7}, but actually \\boxed{42}`: the later box replaces the earlier one
    return len(words) <= max_words


def _unwrap(content: str) -> str:
    content = content.strip()
    inner = last_boxed(content) if _is_whole_box(content) else None
    return inner if inner is not None else content


def _is_whole_box(text: str) -> bool:
    opener = _BOX_OPENER.match(text)
    if opener is None or not text.endswith("}") or text[opener.end() : opener.end() + 1] != "{":
        return False
    return _matching_braces(text, opener.end()).get(opener.end()) == len(text) - 1


def _matching_braces(text: str, start: int) -> dict[int, int]:
    """Index of the closing brace of every group brace opened at or after `start` (one linear pass)."""
    stack: list[int] = []
    closing: dict[int, int] = {}
    for token in _BRACE_TOKEN.finditer(text, start):
        brace = token.group()
        if brace == "{":
            stack.append(token.start())
        elif brace == "}" and stack:
            closing[stack.pop()] = token.start()
    return closing


def answer_in_solution(solution: str, form: str) -> str | None:
    """The gold answer written inside a dataset's worked solution, or None if it has none.

    `form` is `boxed` (MATH, NuminaMath: the final box, joined with boxes written just before it as
    rule 2 joins them) or `gsm8k` (GSM8K: what follows the last `####`, to the end of its line). Golds
    are dataset text, not model output, but the code is the same linear string code.
    """
    if form == "boxed":
        return final_boxes(solution)
    if form == "gsm8k":
        marker = solution.rfind("####")
        if marker < 0:
            return None
        answer = solution[marker + 4 :].split("\n", 1)[0].strip()
        return answer or None
    raise ValueError(f"unknown solution form {form!r}: expected 'boxed' or 'gsm8k'")


def last_answer_phrase(text: str) -> str | None:
    """The answer after the latest `####`, `Answer:` or `answer is` in `text`, or None."""
    anchor = _last_match(_ANCHOR, text)
    if anchor is None:
        return None
    rest = text[anchor.end() :].lstrip(" \t:*")
    rest = rest[2:] if rest.startswith('\\"') else rest.lstrip('"')
    for opener, closer in _MATH_OPENERS:
        if rest.startswith(opener):
            end = _closing_delimiter(rest, closer, len(opener))
            if end > 0:
                return _leading_spans(rest, opener, closer, end)
            break
    line = rest.split("\n", 1)[0]
    sentence_end = _SENTENCE_END.search(line)
    if sentence_end is not None:
        line = line[: sentence_end.start()]
    phrase = line.strip().strip("*").strip()
    return _number_after_prose(phrase) or phrase or None


def _number_after_prose(phrase: str) -> str | None:
    """`34` for `The largest $n$ is 34` or `It started 3 hours ago`: the last number of a phrase that is
    prose (two words or more besides the number, no LaTeX command)."""
    if "\\" in phrase or len(_PROSE_WORD.findall(phrase)) < 2:
        return None
    return last_number(_INLINE_MATH.sub(" ", phrase))


def last_math_span(text: str) -> str | None:
    """The content of the last non-empty `$...$`, `$$...$$`, `\\(...\\)` or `\\[...\\]` in `text`, or None.

    One left-to-right pass over the delimiters: an opener starts a span, its own closer ends it, other
    delimiters inside are ignored. An unclosed span at the end is not an answer.
    """
    return _last_math_span(text)[0]


def _last_math_span(text: str) -> tuple[str | None, int]:
    """(last_math_span, the index where it ends, or 0 when there is none)."""
    group: list[str] = []
    group_end = 0
    opener: re.Match | None = None
    for delimiter in _MATH_DELIMITER.finditer(text):
        token = delimiter.group()
        if token in ("\\\\", "\\$"):
            continue
        if opener is None:
            if token in _SPAN_CLOSER:
                opener = delimiter
        elif token == _SPAN_CLOSER[opener.group()]:
            content = text[opener.end() : delimiter.start()]
            if opener.group() in _INLINE_OPENERS and "\n" in content:
                # Inline math does not run across lines; a `$` left open by a stray dollar sign
                # then opens the next span instead.
                opener = delimiter if token == "$" else None
                continue
            content = content.strip()
            if content:
                joined = group and _is_connector(text[group_end : opener.start()], max_words=0)
                group = [*group, content] if joined else [content]
                group_end = delimiter.end()
            opener = None
    return (",".join(group) if group else None), group_end


def _leading_spans(rest: str, opener: str, closer: str, end: int) -> str:
    """The span that opens `rest` (closing at `end`), joined with the spans a connector links to it
    (`$12$ and $13$` -> `12,13`)."""
    contents = [rest[len(opener) : end].strip()]
    position = end + len(closer)
    while True:
        following = rest.find(opener, position)
        if following < 0 or not _is_connector(rest[position:following], max_words=0):
            break
        closing = _closing_delimiter(rest, closer, following + len(opener))
        if closing < 0:
            break
        contents.append(rest[following + len(opener) : closing].strip())
        position = closing + len(closer)
    return ",".join(content for content in contents if content)


def _closing_delimiter(text: str, closer: str, start: int) -> int:
    if closer == "$":
        dollar = _UNESCAPED_DOLLAR.search(text, start)
        return -1 if dollar is None else dollar.start()
    return text.find(closer, start)


def last_number(text: str) -> str | None:
    """The last number written in `text` (integers, decimals, thousands separators, `a/b`, `\\frac{a}{b}`;
    not one glued to a word, see the module docstring), or None."""
    number = _last_written_number(text)
    return None if number is None else number.group()


def _last_written_number(text: str, start: int = 0) -> re.Match | None:
    written = (number for number in _LAST_NUMBER.finditer(text, start) if not _GLUED_AFTER.match(text, number.end()))
    last = deque(written, maxlen=1)
    return last[0] if last else None


def _last_match(pattern: re.Pattern, text: str, start: int = 0) -> re.Match | None:
    last = deque(pattern.finditer(text, start), maxlen=1)
    return last[0] if last else None
