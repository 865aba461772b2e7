"""The benchmark's corpus and report (a smoke test; throughput is measured by running the benchmark),
and the peer benchmark's reading of a Math-Verify-style test file (a small one written here)."""

from __future__ import annotations

import json
import textwrap
from collections import Counter

import pytest

from rlep.tasks.settings.verifier import VerifierConfig
from rlep.verifiers.bench import build_corpus, run_verify_bench
from rlep.verifiers.peer import PeerCase, load_peer_cases, math_verify_agreement, run_peer_cases


def test_corpus_has_every_share_and_is_deterministic():
    corpus = build_corpus(3000, seed=1)
    kinds = Counter(pair.kind for pair in corpus)
    assert set(kinds) == {"integer", "negative", "fraction", "decimal", "latex", "hostile"}
    assert 0.002 < kinds["hostile"] / len(corpus) < 0.03
    assert corpus == build_corpus(3000, seed=1)
    assert corpus != build_corpus(3000, seed=2)


def test_hostile_share_is_the_one_asked_for():
    corpus = build_corpus(5000, seed=1, hostile_share=0.1)
    share = sum(pair.hostile for pair in corpus) / len(corpus)
    assert 0.09 < share < 0.11


def test_report_is_written_and_no_worker_is_left(tmp_path):
    report = run_verify_bench(n_pairs=80, out_dir=tmp_path, workers=2, seed=3, hostile_share=0.1)
    written = json.loads((tmp_path / report["path"].split("/")[-1]).read_text())
    for key in ("ours", "ours_benign", "math_verify", "speedup_benign", "agreement_benign"):
        assert key in written
    assert written["n_pairs"] == 80
    assert written["ours"]["latency_p99_ms"] >= written["ours"]["latency_p50_ms"]
    assert written["workers_left_after_close"] == []
    # The benign run keeps the default budget (as plain math-verify keeps its own), and says what it decided.
    assert written["ours_benign"]["timeout_seconds"] == VerifierConfig().timeout_seconds
    assert sum(written["ours_benign"]["reasons"].values()) == written["n_benign"]
    assert written["worker_peak_rss_mb"] > 10  # a worker with sympy loaded is tens of MiB
    assert written["caller_peak_rss_mb"] > 10
    # False positives and false negatives, each side, against the corpus's truth by construction.
    for side in ("ours", "math_verify"):
        errors = written["errors"][side]
        assert len(errors["false_positive_examples"]) == min(errors["false_positives"], 10)
        assert len(errors["false_negative_examples"]) == min(errors["false_negatives"], 10)
    assert written["errors"]["ours"]["false_positives"] == 0  # a reward's worst error: accepting a wrong answer


def test_error_counts_split_false_positives_from_false_negatives():
    from rlep.verifiers.bench import error_counts
    from rlep.verifiers.bench_corpus import BenchPair

    pairs = [
        BenchPair("\\boxed{1}", "1", "integer", expected=True),
        BenchPair("\\boxed{2}", "1", "integer", expected=False),
        BenchPair("\\boxed{3}", "1", "integer", expected=False),
        BenchPair("x" * 10, "1", "hostile", hostile=True),
    ]
    errors = error_counts(pairs, [False, True, False, True])
    assert (errors["false_positives"], errors["false_negatives"]) == (1, 1)
    assert errors["false_positive_examples"] == [{"gold": "1", "response": "\\boxed{2}"}]


def test_corpus_knows_which_answers_are_right():
    corpus = build_corpus(2000, seed=4)
    benign = [pair for pair in corpus if not pair.hostile]
    assert all(pair.expected is not None for pair in benign)
    assert 0.2 < sum(not pair.expected for pair in benign) / len(benign) < 0.4
    assert all(pair.expected is None for pair in corpus if pair.hostile)


_PEER_FILE = """
import pytest

def compare_strings(gold, pred, match_types=["latex", "expr"], precision=6):
    raise AssertionError("never called: the file is parsed, not run")

@pytest.mark.parametrize("gold,pred,expected", [("$1$", "$1$", 1), ("$2$", "$3$", 0), ("$7$", "I think 7", 0)])
def test_latex_default(gold, pred, expected):
    assert compare_strings(gold, pred, match_types=["latex"]) == expected

@pytest.mark.parametrize("gold,pred,expected", [("$4$", "so \\\\boxed{4}", 1), ("$7$", "I think 7", 1)])
def test_both_default(gold, pred, expected):
    assert compare_strings(gold, pred) == expected

@pytest.mark.parametrize("gold,pred,expected", [("5", "5", 1)])
def test_expr_only(gold, pred, expected):
    assert compare_strings(gold, pred, match_types=["expr"]) == expected

@pytest.mark.parametrize("gold,pred,expected", [("$0.1$", "$0.11$", 1)])
def test_other_precision(gold, pred, expected):
    assert compare_strings(gold, pred, match_types=["latex"], precision=1) == expected
"""


def _checkout(tmp_path, files: dict[str, str]):
    for name in ("tests/test_all.py", "tests/test_numina_cases.py", "tests/test_open_thoughts.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(files.get(name, "")))
    return tmp_path


def test_peer_cases_are_the_latex_default_setting_rows(tmp_path):
    cases = load_peer_cases(_checkout(tmp_path, {"tests/test_all.py": _PEER_FILE}))
    latex, both = ("latex",), ("latex", "expr")
    assert cases == [
        PeerCase("test_all.py::test_latex_default", "$1$", "$1$", True, latex),
        PeerCase("test_all.py::test_latex_default", "$2$", "$3$", False, latex),
        PeerCase("test_all.py::test_latex_default", "$7$", "I think 7", False, latex),
        PeerCase("test_all.py::test_both_default", "$4$", "so \\boxed{4}", True, both),
        PeerCase("test_all.py::test_both_default", "$7$", "I think 7", True, both),
    ]
    # A bare number counts only where the case's match types include expressions (our last-number fallback).
    report = run_peer_cases(cases)
    assert (report["agree"], report["n_cases"], report["disagreements"]) == (5, 5, [])
    assert (report["false_positives"], report["false_negatives"]) == (0, 0)
    peer = math_verify_agreement(cases)
    assert (peer["agree"], peer["false_positives"], peer["false_negatives"]) == (5, 0, 0)


def test_peer_disagreements_are_split_into_false_positives_and_negatives():
    cases = [
        PeerCase("t::a", "$1$", "$1$", False, ("latex",)),  # judged equal, expected not: a false positive
        PeerCase("t::b", "$1$", "$2$", True, ("latex",)),  # a false negative
        PeerCase("t::c", "$1$", "$2$", False, ("latex",)),
    ]
    report = run_peer_cases(cases)
    assert (report["agree"], report["false_positives"], report["false_negatives"]) == (1, 1, 1)


def test_peer_needs_a_checkout(tmp_path):
    with pytest.raises(FileNotFoundError, match="Math-Verify"):
        load_peer_cases(tmp_path)
