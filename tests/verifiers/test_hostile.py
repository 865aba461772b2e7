"""Hostile answers: each returns a verdict (never an exception or a hang), and nothing is executed."""

from __future__ import annotations

import os
import random
import re
import shutil
import string
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import rlep.verifiers as verifiers
from rlep.verifiers import verify_batch

TIMEOUT = 1.0
GRACE = 0.3

# (name, response, the verdict's reason). Gold is "2" for every row. Each row names the one reason its
# answer gets: `timeout` where the computation has no end in sight (a power tower is never finished), the
# exact decision everywhere else.
HOSTILE: list[tuple[str, str, str]] = [
    ("power tower", "\\boxed{9^{9^{9^{9}}}}", "timeout"),
    ("huge power", "\\boxed{10^{10^{9}}}", "timeout"),
    ("factorial", "\\boxed{100000!}", "not-equal"),  # ~0.1 s of sympy: evaluated, and not 2
    ("huge factorial", "\\boxed{(10^{8})!}", "timeout"),
    ("nested parentheses", "\\boxed{" + "(" * 5000 + "2" + ")" * 5000 + "}", "too-long"),
    ("nested, short", "\\boxed{" + "(" * 200 + "2" + ")" * 200 + "}", "parse-error"),
    ("1 MB response", "The answer is " + "9" * 1_000_000, "too-long"),
    ("1 MB of text then a box", "x" * 1_000_000 + "\\boxed{2}", "too-long"),
    ("NUL bytes", "\x00\\boxed{\x003\x00}\x00", "not-equal"),
    ("unbalanced braces", "\\boxed{{{{\\frac{3", "not-equal"),
    ("unbalanced closers", "\\boxed{3}}}}}", "not-equal"),
    ("empty box", "\\boxed{}", "no-answer"),
    ("empty box after a good one", "\\boxed{2} \\boxed{}", "no-answer"),
    ("only whitespace", "   \n\t ", "no-answer"),
    ("deep exponent", "\\boxed{" + "2^{" * 200 + "2" + "}" * 200 + "}", "parse-error"),
    ("many boxes", "\\boxed{1}" * 10_000, "too-long"),  # joined into one list answer of 20,000 characters
    ("long answer", "\\boxed{" + "1+" * 2000 + "1}", "too-long"),
    ("latex garbage", "\\boxed{\\frac{\\frac{\\frac{}{}}{}}{\\sqrt[}}", "parse-error"),
    ("control characters", "\\boxed{\x1b[31m2\x1b[0m}", "parse-error"),  # `[31m2 [0m` is no number
]


def test_hostile_corpus_returns_verdicts_within_limits():
    responses = [response for _, response, _ in HOSTILE]
    start = time.monotonic()
    verdicts = verify_batch(responses, ["2"] * len(responses), timeout_seconds=TIMEOUT, kill_grace_seconds=GRACE)
    elapsed = time.monotonic() - start
    for (name, _, reason), verdict in zip(HOSTILE, verdicts, strict=True):
        assert verdict.reason == reason, (name, verdict)
        assert not verdict.correct, (name, verdict)
        assert verdict.cpu_seconds <= TIMEOUT + GRACE + 0.5, (name, verdict)  # CPU time: the load does not count
    # Every answer is bounded, so the batch is too (slow answers run in parallel on the workers); in CPU time,
    # so its wall time grows with the machine's load: about 2 s on quiet cores.
    assert elapsed < 60, elapsed


def test_full_width_digits_are_read_as_digits():
    # Hostile in bytes, honest in meaning: NFKC folding is the documented policy.
    verdict = verifiers.verify("\\boxed{１２}", "12")
    assert verdict.correct and verdict.reason == "equal"


def _injections(canary: Path) -> list[str]:
    target = str(canary)
    return [
        f"__import__('os').system('touch {target}')",
        f"\\boxed{{__import__('os').system('touch {target}')}}",
        f"\\boxed{{os.system('touch {target}')}}",
        f"Answer: exec(\"import os; os.system('touch {target}')\")",
        f'#### __import__("pathlib").Path("{target}").touch()',
        f"\\boxed{{eval(\"open('{target}', 'w')\")}}",
        f"\\boxed{{(lambda: open('{target}', 'w'))()}}",
        f"\\boxed{{\\text{{__import__('os').system('touch {target}')}}}}",
        f"$\\boxed{{Symbol('x').__class__.__init__.__globals__['os'].system('touch {target}')}}$",
        f"The answer is [c for c in ().__class__.__base__.__subclasses__()] and open('{target}','w')",
        f"\\boxed{{{{}}.__class__}}; open('{target}', 'w').write('x')",
    ]


def _has_digit(text: str) -> bool:
    return re.search(r"\d", text) is not None


def _digitless_folder(bases: list[str]) -> str | None:
    """The first of `bases` with no digit in its path that this process can write in, or None."""
    return next((b for b in bases if not _has_digit(b) and os.access(b, os.W_OK | os.X_OK)), None)


def test_digit_guard_refuses_a_path_with_a_digit(tmp_path, canary):
    """The canary's guard sees digits: a folder with one (pytest's own, `.../pytest-N/...`) is refused, and a
    writable folder without digits (the canary's) is taken."""
    numbered = tmp_path / "run-7"
    numbered.mkdir()
    assert _has_digit(str(numbered)) and not _has_digit("/tmp/rlep-canary-abc")
    assert _digitless_folder([str(numbered)]) is None
    assert _digitless_folder([str(numbered), str(canary.parent)]) == str(canary.parent)


@pytest.fixture
def canary() -> Iterator[Path]:
    """A path for the canary file with no digit in it, in a fresh folder of its own.

    Not pytest's `tmp_path`: that holds the run's number (`.../pytest-1/...`, or whatever `--basetemp`
    names), and a digit in the attack strings gives the verifier something to read as an answer, so the
    test would judge that number instead of the attack (issue 34)."""
    bases = [tempfile.gettempdir(), "/tmp", "/var/tmp"]
    base = _digitless_folder(bases)
    if base is None:
        pytest.fail(f"no writable temporary folder without digits among {bases}")
    folder = Path(base) / ("rlep-canary-" + "".join(random.choices(string.ascii_lowercase, k=16)))
    folder.mkdir(mode=0o700)
    yield folder / "canary"
    shutil.rmtree(folder)


def test_injection_strings_never_execute(canary):
    attacks = _injections(canary)
    assert not _has_digit("".join(attacks))  # nothing in an attack that could pass for a number
    # As responses, and as golds too: gold answers come from data files that could be tampered with.
    verdicts = verify_batch(attacks + ["\\boxed{1}"] * len(attacks), ["1"] * len(attacks) + attacks)
    assert not canary.exists()
    as_answers, as_golds = verdicts[: len(attacks)], verdicts[len(attacks) :]
    # Refused for what they are: Python-looking text is a parse error, an attack with no answer in it is
    # no answer; never compared with the gold as if it were mathematics.
    for attack, verdict in zip(attacks, as_answers, strict=True):
        assert not verdict.correct and verdict.reason in ("parse-error", "no-answer"), (attack, verdict)
    for attack, verdict in zip(attacks, as_golds, strict=True):
        assert not verdict.correct and verdict.reason == "parse-error", (attack, verdict)


# The peer benchmark runs plain math-verify, expression reader included, on the fixed cases of its own
# repository (`rlep bench verify --peer`); it is no judging path, and only the bench imports it.
PEER_RUNNER = "peer.py"


def test_no_code_path_hands_text_to_python_evaluation():
    source_dir = Path(verifiers.__file__).parent
    calls = re.compile(r"\b(?:eval|exec|sympify|parse_expr|S)\s*\(|ExprExtractionConfig")
    scanned = [path for path in source_dir.glob("*.py") if path.name != PEER_RUNNER]
    assert len(scanned) >= 10
    for path in scanned:
        assert not calls.search(path.read_text()), path
    importers = [path.name for path in scanned if "rlep.verifiers.peer" in path.read_text()]
    assert importers == ["bench.py"]


@pytest.mark.parametrize("bad", [None, 3, b"\\boxed{1}"])
def test_non_string_input_is_a_caller_error(bad):
    with pytest.raises(TypeError):
        verify_batch([bad], ["1"])
