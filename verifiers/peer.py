"""Peer benchmark: Math-Verify's own regression cases, run against rlep's verifier.

    rlep bench verify --peer /path/to/Math-Verify      # a local checkout; never vendored, not run in CI

huggingface/Math-Verify keeps its regression cases as `gold, pred, expected` tables that its tests feed
to a `compare_strings(gold, pred, match_types=[...])` helper. This module reads those tables out of
`tests/test_all.py`, `tests/test_numina_cases.py` and `tests/test_open_thoughts.py` with `ast` (the files
are parsed, never imported or executed) and keeps the cases that use LaTeX extraction with default
settings: the test body calls `compare_strings(gold, pred, match_types=[..."latex"...])` and passes no
other option (no `precision=`, `strict=`, `allow_set_relation_comp=`).

Each case is judged as math-verify judges it: both strings are *responses* (extraction runs on the gold
too), and the expected value is the one written in their table. Their `match_types` map onto our one
extraction switch: a case whose match types include `"expr"` (bare expressions and numbers anywhere in
the text) runs with `fallback_last_number=True`, a LaTeX-only case with it off. Agreement is the share
of cases where our verdict equals that expected value; the disagreements are split into false positives
(expected wrong, judged correct) and false negatives. Plain math-verify is run on the same cases too,
as their test does (its parse and verify, their extraction configs, in this process), so the two
agreements come from one run.
"""

from __future__ import annotations

import ast
import json
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

PEER_FILES = ("tests/test_all.py", "tests/test_numina_cases.py", "tests/test_open_thoughts.py")
_DEFAULT_OPTIONS = {"match_types"}


@dataclass(frozen=True, slots=True)
class PeerCase:
    """One row of a peer table: gold and prediction as written there, and the expected verdict."""

    source: str  # "file.py::test_name"
    gold: str
    pred: str
    expected: bool
    match_types: tuple[str, ...] = ("latex", "expr")


def load_peer_cases(checkout: Path) -> list[PeerCase]:
    """The default-settings LaTeX `compare_strings` cases of a Math-Verify checkout at `checkout`."""
    cases: list[PeerCase] = []
    for relative in PEER_FILES:
        path = Path(checkout) / relative
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found: --peer expects a checkout of huggingface/Math-Verify")
        tree = ast.parse(path.read_text(), filename=str(path))
        for function in tree.body:
            match_types = _latex_default_match_types(function) if isinstance(function, ast.FunctionDef) else None
            if match_types is not None:
                rows = _parametrized_rows(function)
                cases += [PeerCase(f"{path.name}::{function.name}", *row, match_types) for row in rows]
    return cases


def _latex_default_match_types(function: ast.FunctionDef) -> tuple[str, ...] | None:
    """The match types of the test's one `compare_strings` call if it uses LaTeX extraction and no other
    option, else None."""
    calls = [
        node
        for node in ast.walk(function)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "compare_strings"
    ]
    if len(calls) != 1:
        return None
    keywords = {keyword.arg: keyword.value for keyword in calls[0].keywords}
    if set(keywords) - _DEFAULT_OPTIONS:
        return None
    match_types = keywords.get("match_types")
    if match_types is None:
        return ("latex", "expr")  # their default
    try:
        types = tuple(ast.literal_eval(match_types))
    except ValueError:
        return None
    return types if "latex" in types else None


def _parametrized_rows(function: ast.FunctionDef) -> list[tuple[str, str, bool]]:
    for decorator in function.decorator_list:
        if not (isinstance(decorator, ast.Call) and getattr(decorator.func, "attr", None) == "parametrize"):
            continue
        names = ast.literal_eval(decorator.args[0])
        if [name.strip() for name in names.split(",")] != ["gold", "pred", "expected"]:
            return []
        rows = ast.literal_eval(decorator.args[1])
        return [(gold, pred, bool(expected)) for gold, pred, expected in rows]
    return []


def run_peer_cases(cases: list[PeerCase], config=None) -> dict:
    """Judge every case with rlep's verifier; the agreement count and the cases that disagree."""
    from rlep.tasks.settings.verifier import VerifierConfig
    from rlep.verifiers.api import verify_batch

    base = config if config is not None else VerifierConfig()
    verdicts: list = [None] * len(cases)
    for fallback in (True, False):
        indices = [i for i, case in enumerate(cases) if ("expr" in case.match_types) is fallback]
        judged = verify_batch(
            [cases[i].pred for i in indices],
            [cases[i].gold for i in indices],
            config=base.model_copy(update={"fallback_last_number": fallback}),
        )
        for index, verdict in zip(indices, judged, strict=True):
            verdicts[index] = verdict
    disagreements = [
        {
            "source": case.source,
            "gold": case.gold,
            "pred": case.pred,
            "expected": case.expected,
            "ours": verdict.reason,
            "extracted": verdict.extracted,
        }
        for case, verdict in zip(cases, verdicts, strict=True)
        if verdict.correct != case.expected
    ]
    return {
        "n_cases": len(cases),
        "agree": len(cases) - len(disagreements),
        "false_positives": sum(not row["expected"] for row in disagreements),
        "false_negatives": sum(row["expected"] for row in disagreements),
        "agreement": (len(cases) - len(disagreements)) / max(len(cases), 1),
        "disagreements": disagreements,
    }


def math_verify_agreement(cases: list[PeerCase]) -> dict:
    """Plain math-verify on the same cases, as their `compare_strings` runs them (main thread: it uses
    signal.alarm). The strings are the fixed cases of their repository, never model output."""
    import math_verify

    configs = {
        "latex": lambda: math_verify.LatexExtractionConfig(boxed_match_priority=0),
        "expr": lambda: math_verify.ExprExtractionConfig(),
    }
    agree, false_positives, false_negatives, failed = 0, 0, 0, []
    for case in cases:
        targets = [configs[kind]() for kind in case.match_types]
        try:
            gold = math_verify.parse(case.gold, targets)
            verdict = bool(math_verify.verify(gold, math_verify.parse(case.pred, targets)))
        except Exception as err:  # a peer failure counts as a disagreement, with its message
            verdict, failed = None, [*failed, f"{case.source}: {type(err).__name__}: {err}"]
        agree += verdict is case.expected
        false_positives += verdict is True and not case.expected
        false_negatives += verdict is not True and case.expected
    return {
        "agree": agree,
        "agreement": agree / max(len(cases), 1),
        "false_positives": false_positives,
        "false_negatives": false_negatives,
        "errors": failed,
    }


def run_peer_bench(checkout: Path, out_dir: Path = Path("bench/results"), workers: int | None = None) -> dict:
    """Math-Verify's regression cases from a local checkout, judged by rlep (verifiers.peer); print and
    write the agreement and every disagreement."""
    from rich.console import Console
    from rich.table import Table

    from rlep.tasks.settings.verifier import VerifierConfig

    console = Console()
    cases = load_peer_cases(checkout)
    start = time.perf_counter()
    report = run_peer_cases(cases, VerifierConfig(workers=workers))
    seconds = time.perf_counter() - start
    start = time.perf_counter()
    peer = math_verify_agreement(cases)
    report.update(
        created_at=datetime.now(timezone.utc).isoformat(),
        checkout=str(checkout),
        seconds=seconds,
        math_verify={**peer, "seconds": time.perf_counter() - start},
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"verify-peer-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(report, indent=2))
    table = Table(title="disagreements with Math-Verify's expected verdicts")
    for column in ("case", "gold", "pred", "expected", "ours"):
        table.add_column(column, overflow="fold")
    for row in report["disagreements"]:
        table.add_row(row["source"], row["gold"][:80], row["pred"][-80:], str(row["expected"]), row["ours"])
    console.print(table)
    console.print(
        f"peer agreement: rlep {report['agree']} of {report['n_cases']} ({report['agreement']:.1%}), "
        f"plain math-verify {peer['agree']} of {report['n_cases']} ({peer['agreement']:.1%}); wrote {path}"
    )
    console.print(
        f"false positives (expected wrong, judged correct): rlep {report['false_positives']}, math-verify "
        f"{peer['false_positives']}; false negatives: rlep {report['false_negatives']}, math-verify "
        f"{peer['false_negatives']}"
    )
    return report
