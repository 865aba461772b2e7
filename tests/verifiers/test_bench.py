"""The benchmark's corpus and report (a smoke test; throughput is measured by running the benchmark)."""

from __future__ import annotations

import json
from collections import Counter

from verifiers.bench import build_corpus, run_verify_bench


def test_corpus_has_every_share_and_is_deterministic():
    corpus = build_corpus(3000, seed=1)
    kinds = Counter(pair.kind for pair in corpus)
    assert set(kinds) == {"integer", "negative", "fraction", "decimal", "latex", "hostile"}
    assert 0.002 < kinds["hostile"] / len(corpus) < 0.03
    assert corpus == build_corpus(3000, seed=1)
    assert corpus != build_corpus(3000, seed=2)


def test_report_is_written(tmp_path):
    report = run_verify_bench(n_pairs=80, out_dir=tmp_path, workers=2, seed=3)
    written = json.loads((tmp_path / report["path"].split("/")[-1]).read_text())
    for key in ("ours", "ours_benign", "math_verify", "speedup_benign", "agreement_benign"):
        assert key in written
    assert written["n_pairs"] == 80
    assert written["ours"]["latency_p99_ms"] >= written["ours"]["latency_p50_ms"]
