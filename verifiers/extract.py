"""Finding the final answer in a model response.

Pure string code that runs in linear time in the response length (no regex here can backtrack
super-linearly), so a hostile response can only cost time proportional to its size, which the caller
bounds with `max_response_chars`.

Where the answer is looked for, in order:

1. If the response contains `</think>`, only the text after the last `</think>` is read; reasoning
   inside an unclosed `<think>` is read like any other text.
2. The last complete `\\boxed{...}` or `\\fbox{...}` (nested braces allowed, `\\boxed 5` too). "Last"
   means the box that closes last, so in `\\boxed{\\boxed{5}}` the outer box counts (and is unwrapped).
   A box whose braces never close (a truncated response) is skipped.
3. Otherwise the latest answer phrase: `#### X` (GSM8K), `Answer: X` (DAPO, Minerva), or
   `the (final) answer is X`. The phrase runs to the end of its line, or to the end of the `$...$`,
   `\\(...\\)` or `\\[...\\]` it starts with, and stops at a sentence-ending period.
4. Otherwise, when `fallback_last_number` is on, the last number in the text (`-12`, `1,234.5`, `3/4`,
   `\\frac{3}{4}` with integer parts).
"""

from __future__ import annotations

import re
from collections import deque

THINK_CLOSE = "</think>"

_BOX_OPENER = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])\s*")
# Group braces and the escapes that are not group braces (`\{`, `\}`), plus `\\` so that the brace
# after a LaTeX line break still counts.
_BRACE_TOKEN = re.compile(r"\\[{}\\]|[{}]")
_UNBRACED_BOX_ARG = re.compile(r"[^\s$]+")
_ANCHOR = re.compile(r"####|\banswer(?:\*\*)?[ \t]{0,8}(?:is\b|:|：)", re.IGNORECASE)
_MATH_OPENERS = (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$"))
_SENTENCE_END = re.compile(r"\.(?:\s|$)")
_LAST_NUMBER = re.compile(r"-?\\[dt]?frac\{-?\d+\}\{-?\d+\}|(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?")
# A `$` that closes inline math: not the escaped dollar sign `\$`.
_UNESCAPED_DOLLAR = re.compile(r"(?<!\\)\$")


def extract_answer(response: str, fallback_last_number: bool = True) -> str | None:
    """The final answer written in `response`, as raw text, or None if there is none.

    The rules are listed in this module's docstring; an empty box gives "" (an answer that says
    nothing), not None.
    """
    text = response.replace("\x00", "")
    think_end = text.rfind(THINK_CLOSE)
    if think_end >= 0:
        text = text[think_end + len(THINK_CLOSE) :]
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    phrase = last_answer_phrase(text)
    if phrase is not None:
        return phrase
    if fallback_last_number:
        return last_number(text)
    return None


def last_boxed(text: str) -> str | None:
    """The content of the box in `text` that closes last, unwrapped while it is itself a whole box."""
    openers = list(_BOX_OPENER.finditer(text))
    if not openers:
        return None
    closing = _matching_braces(text, openers[0].end())
    best: tuple[int, int, str] | None = None  # (end, -start, content)
    for opener in openers:
        start = opener.end()
        if start < len(text) and text[start] == "{":
            end = closing.get(start)
            if end is None:
                continue
            content = text[start + 1 : end]
        else:
            argument = _UNBRACED_BOX_ARG.match(text, start)
            if argument is None:
                continue
            end, content = argument.end(), argument.group()
        candidate = (end, -opener.start(), content)
        if best is None or candidate > best:
            best = candidate
    if best is None:
        return None
    content = best[2].strip()
    inner = last_boxed(content)
    if inner is not None and _is_whole_box(content):
        return inner
    return content


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


def last_answer_phrase(text: str) -> str | None:
    """The answer after the latest `####`, `Answer:` or `answer is` in `text`, or None."""
    anchor = _last_match(_ANCHOR, text)
    if anchor is None:
        return None
    rest = text[anchor.end() :].lstrip(" \t:*")
    for opener, closer in _MATH_OPENERS:
        if rest.startswith(opener):
            end = _closing_delimiter(rest, closer, len(opener))
            if end > 0:
                return rest[len(opener) : end].strip()
            break
    line = rest.split("\n", 1)[0]
    sentence_end = _SENTENCE_END.search(line)
    if sentence_end is not None:
        line = line[: sentence_end.start()]
    phrase = line.strip().strip("*").strip()
    return phrase or None


def _closing_delimiter(text: str, closer: str, start: int) -> int:
    if closer == "$":
        dollar = _UNESCAPED_DOLLAR.search(text, start)
        return -1 if dollar is None else dollar.start()
    return text.find(closer, start)


def last_number(text: str) -> str | None:
    """The last number in `text` (integers, decimals, thousands separators, `a/b`, `\\frac{a}{b}`), or None."""
    number = _last_match(_LAST_NUMBER, text)
    return None if number is None else number.group()


def _last_match(pattern: re.Pattern, text: str) -> re.Match | None:
    last = deque(pattern.finditer(text), maxlen=1)
    return last[0] if last else None
