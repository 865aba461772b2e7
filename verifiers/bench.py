"""Benchmark: rlep's `verify_batch` against plain math-verify, on the same corpus, in the same run.

    python -m verifiers.bench --pairs 10000          # or: rlep bench verify --pairs 10000

The corpus (seeded) mimics what the trainer verifies: tiny-math style answers (integers, negatives,
fractions written as `0.75`, `3/4` or `\\frac{3}{4}`, decimals) in the answer formats models use (boxed,
`Answer:`, `####`, "the answer is", bare last number, with and without `<think>`), about a third of them
wrong; a share of varied LaTeX (radicals, polynomials, intervals, sets, percent, units); and a 1% hostile
share (power towers, injections, nested parentheses, a 1 MB response, NUL bytes, ...).

Measured:
- ours: `verify_batch` over the whole corpus through the worker pool (started before timing, as in a
  long training run, but with empty caches), fed by two caller threads in slices so a progress bar
  can move;
- ours, benign only: the same without the hostile share, on fresh workers again; this is what the
  ratio compares;
- plain math-verify: `parse("\\boxed{" + gold + "}")`, `parse(response)`, `verify(...)` per pair in this
  process with its default settings (the gold wrapped in a box as verl's math-verify reward does), on the benign pairs only (a hostile pair can hang it: no process boundary).

Reported: verdicts/s of each, the ratio, agreement on benign pairs (with examples of disagreements),
p50/p99 of per-answer latency (our workers' time per answer; math-verify's wall time per pair), and the
verdict reasons. The JSON lands in `out_dir/verify-<timestamp>.json`.

The benchmark uses `timeout_seconds=1.0` so that the few slow hostile answers cost seconds, not minutes;
everything else is the default VerifierConfig.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from fractions import Fraction
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from verifiers.api import verify_batch
from verifiers.config import VerifierConfig
from verifiers.pool import close_shared_pools, shared_pool

HOSTILE_SHARE = 0.01
LATEX_SHARE = 0.14
WRONG_SHARE = 0.3
BENCH_TIMEOUT_SECONDS = 1.0
SLICE = 250


@dataclass(frozen=True)
class BenchPair:
    response: str
    gold: str
    kind: str
    hostile: bool = False


def run_verify_bench(
    n_pairs: int = 10000, out_dir: Path = Path("bench/results"), workers: int | None = None, seed: int = 0
) -> dict:
    """Build the corpus, time both verifiers, print a summary and write it as JSON; return the report."""
    console = Console()
    pairs = build_corpus(n_pairs, seed)
    benign = [pair for pair in pairs if not pair.hostile]
    config = VerifierConfig(workers=workers, timeout_seconds=BENCH_TIMEOUT_SECONDS)

    with Progress(console=console, transient=True) as progress:
        # Each measured run gets fresh workers: the second run must not find the first one's answers
        # in the workers' caches.
        pool_start_seconds = _fresh_pool(config)
        ours_all, ours_all_seconds = _run_ours(pairs, config, progress, "ours, whole corpus")
        kills = shared_pool(config).kills
        _fresh_pool(config)
        ours_benign, ours_benign_seconds = _run_ours(benign, config, progress, "ours, benign only")
        plain, plain_latencies, plain_seconds = _run_math_verify(benign, progress)

    ours_benign_rate = len(benign) / ours_benign_seconds
    plain_rate = len(benign) / plain_seconds
    agree = [ours.correct == theirs for ours, theirs in zip(ours_benign, plain, strict=True)]
    disagreements = [
        {
            "kind": pair.kind,
            "gold": pair.gold,
            "response": pair.response[:200],
            "ours": ours.reason,
            "math_verify": theirs,
        }
        for pair, ours, theirs, same in zip(benign, ours_benign, plain, agree, strict=True)
        if not same
    ]
    hostile_verdicts = [v for pair, v in zip(pairs, ours_all, strict=True) if pair.hostile]
    report = {
        "created_at": datetime.now(timezone.utc).isoformat(),
        "n_pairs": len(pairs),
        "n_benign": len(benign),
        "n_hostile": len(pairs) - len(benign),
        "n_unique_pairs": len({(p.response, p.gold) for p in pairs}),
        "seed": seed,
        "cpu_count": os.cpu_count(),
        "load_average_at_end": os.getloadavg(),
        "config": config.model_dump(),
        "workers": config.n_workers,
        "pool_start_seconds": pool_start_seconds,
        "ours": {
            "verdicts_per_second": len(pairs) / ours_all_seconds,
            "seconds": ours_all_seconds,
            "latency_p50_ms": _percentile([v.seconds for v in ours_all], 50) * 1e3,
            "latency_p99_ms": _percentile([v.seconds for v in ours_all], 99) * 1e3,
            "reasons": dict(Counter(v.reason for v in ours_all)),
            "hostile_reasons": dict(Counter(v.reason for v in hostile_verdicts)),
            "hostile_max_seconds": max((v.seconds for v in hostile_verdicts), default=0.0),
            "kills": kills,
        },
        "ours_benign": {
            "verdicts_per_second": ours_benign_rate,
            "seconds": ours_benign_seconds,
            "latency_p50_ms": _percentile([v.seconds for v in ours_benign], 50) * 1e3,
            "latency_p99_ms": _percentile([v.seconds for v in ours_benign], 99) * 1e3,
        },
        "math_verify": {
            "verdicts_per_second": plain_rate,
            "seconds": plain_seconds,
            "latency_p50_ms": _percentile(plain_latencies, 50) * 1e3,
            "latency_p99_ms": _percentile(plain_latencies, 99) * 1e3,
        },
        "speedup_benign": ours_benign_rate / plain_rate,
        "agreement_benign": sum(agree) / len(agree) if agree else 1.0,
        "disagreements": {
            "only_ours_correct": sum(d["ours"] == "equal" for d in disagreements),
            "only_math_verify_correct": sum(d["ours"] != "equal" for d in disagreements),
        },
        "accuracy": {
            "ours": sum(v.correct for v in ours_benign) / max(len(benign), 1),
            "math_verify": sum(plain) / max(len(benign), 1),
        },
        "disagreements_by_kind": dict(Counter(d["kind"] for d in disagreements)),
        "disagreement_examples": disagreements[:40],
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"verify-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(report, indent=2))
    report["path"] = str(path)
    _print_summary(console, report)
    return report


def _fresh_pool(config: VerifierConfig) -> float:
    """Replace the shared pool by a new, started one; return how long starting it took."""
    close_shared_pools()
    start = time.perf_counter()
    shared_pool(config).run([("\\boxed{1}", "1")] * config.n_workers, config)
    return time.perf_counter() - start


def _run_ours(pairs: list[BenchPair], config: VerifierConfig, progress: Progress, label: str):
    task = progress.add_task(label, total=len(pairs))
    slices = [pairs[i : i + SLICE] for i in range(0, len(pairs), SLICE)]

    def run(chunk: list[BenchPair]):
        verdicts = verify_batch([p.response for p in chunk], [p.gold for p in chunk], config=config)
        progress.advance(task, len(chunk))
        return verdicts

    start = time.perf_counter()
    # Two callers keep every worker fed while one slice waits for its slowest answer.
    with ThreadPoolExecutor(max_workers=2) as callers:
        verdicts = [v for chunk_verdicts in callers.map(run, slices) for v in chunk_verdicts]
    return verdicts, time.perf_counter() - start


def _run_math_verify(pairs: list[BenchPair], progress: Progress):
    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    task = progress.add_task("plain math-verify, benign only", total=len(pairs))
    results, latencies = [], []
    start = time.perf_counter()
    for pair in pairs:
        began = time.perf_counter()
        # Gold wrapped in a box, as verl's math-verify reward does: a bare `x^2-1` is not read as LaTeX.
        results.append(bool(verify(parse(f"\\boxed{{{pair.gold}}}"), parse(pair.response))))
        latencies.append(time.perf_counter() - began)
        progress.advance(task)
    return results, latencies, time.perf_counter() - start


def _percentile(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def _print_summary(console: Console, report: dict) -> None:
    table = Table(title=f"verify bench: {report['n_pairs']} pairs, {report['workers']} workers")
    for column in ("", "verdicts/s", "p50 ms", "p99 ms", "seconds"):
        table.add_column(column)
    for name, key in (
        ("ours (all)", "ours"),
        ("ours (benign)", "ours_benign"),
        ("math-verify (benign)", "math_verify"),
    ):
        row = report[key]
        table.add_row(
            name,
            f"{row['verdicts_per_second']:.0f}",
            f"{row['latency_p50_ms']:.3f}",
            f"{row['latency_p99_ms']:.3f}",
            f"{row['seconds']:.2f}",
        )
    console.print(table)
    console.print(
        f"speed-up (benign) {report['speedup_benign']:.1f}x, agreement (benign) {report['agreement_benign']:.2%}, "
        f"hostile reasons {report['ours']['hostile_reasons']}, kills {report['ours']['kills']}"
    )
    console.print(f"wrote {report['path']}")


def build_corpus(n_pairs: int, seed: int = 0) -> list[BenchPair]:
    """`n_pairs` (response, gold) pairs: tiny-math style, varied LaTeX and a hostile share (see module doc)."""
    rng = random.Random(f"verify-bench/{seed}")
    pairs = []
    for _ in range(n_pairs):
        draw = rng.random()
        if draw < HOSTILE_SHARE:
            pairs.append(_hostile_pair(rng))
        elif draw < HOSTILE_SHARE + LATEX_SHARE:
            pairs.append(_latex_pair(rng))
        else:
            pairs.append(_arithmetic_pair(rng))
    return pairs


def _arithmetic_pair(rng: random.Random) -> BenchPair:
    kind = rng.choice(("integer", "integer", "negative", "fraction", "decimal"))
    if kind == "integer":
        value = Fraction(rng.randint(0, 99_999))
    elif kind == "negative":
        value = Fraction(-rng.randint(1, 9_999))
    elif kind == "fraction":
        value = Fraction(rng.randint(1, 99), rng.choice((2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 20, 25)))
    else:
        value = Fraction(rng.randint(-9_999, 9_999), 100)
    # Gold strings as tiny-math writes them: integers, reduced fractions, decimals without trailing zeros.
    gold = _decimal(value) if kind == "decimal" else _canonical(value)
    answer = value if rng.random() >= WRONG_SHARE else value + rng.choice((1, -1, 10, Fraction(1, 2)))
    return BenchPair(_render(rng, rng.choice(_written_forms(answer))), gold, kind)


def _canonical(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    return f"{value.numerator}/{value.denominator}"


def _decimal(value: Fraction) -> str:
    text = f"{float(value):.6f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def _written_forms(value: Fraction) -> list[str]:
    forms = [_canonical(value)]
    if value.denominator == 1:
        forms.append(f"{value.numerator}.0")
        if abs(value) >= 1000:
            forms.append(f"{value.numerator:,}")
    else:
        sign = "-" if value < 0 else ""
        p, q = abs(value.numerator), value.denominator
        forms += [f"{sign}\\frac{{{p}}}{{{q}}}", f"{sign}\\dfrac{{{p}}}{{{q}}}", f"{value.numerator}/{q}"]
        if 10**6 % q == 0:
            forms.append(_decimal(value))
    return forms


_THINKING = (
    "Let me add the numbers step by step. 12 + 7 = 19, then carry the 1.",
    "First compute the product, 6 times 7 is 42; then adjust.",
    "We need a common denominator of 12 here.",
)


def _render(rng: random.Random, answer: str) -> str:
    style = rng.randrange(7)
    if style == 0:
        text = f"\\boxed{{{answer}}}"
    elif style == 1:
        text = f"The sum is computed above. The answer is ${answer}$."
    elif style == 2:
        text = f"{rng.choice(_THINKING)}\n#### {answer}"
    elif style == 3:
        text = f"{rng.choice(_THINKING)}\nAnswer: {answer}"
    elif style == 4:
        text = f"<think>{rng.choice(_THINKING)}</think>So the result is $\\boxed{{{answer}}}$."
    elif style == 5:
        text = f"{rng.choice(_THINKING)} Therefore the final answer is $\\boxed{{{answer}}}$"
    else:
        text = f"{rng.choice(_THINKING)} So we get {answer}"
    return text


def _latex_case(rng: random.Random) -> tuple[str, str, str]:
    """(gold, a right answer, a wrong answer) in varied LaTeX, with random numbers so that few repeat."""
    a = rng.randint(2, 30)
    b = rng.randint(a + 1, 60)
    k = rng.choice((2, 3, 5, 6, 7, 10, 11))
    e = a % 12 + 1
    cases = (
        (f"\\frac{{\\sqrt{{{k}}}}}{{{k}}}", f"\\frac{{1}}{{\\sqrt{{{k}}}}}", f"\\sqrt{{{k}}}"),
        (f"{a}\\sqrt{{{k}}}", f"\\sqrt{{{a * a * k}}}", f"{a + 1}\\sqrt{{{k}}}"),
        (f"x^2+{2 * a}x+{a * a}", f"(x+{a})^2", f"(x-{a})^2"),
        (f"x^2-{a * a}", f"(x-{a})(x+{a})", f"(x-{a})^2"),
        (f"\\frac{{{a}\\pi}}{{{b}}}", f"{a}\\pi/{b}", f"\\frac{{{b}\\pi}}{{{a}}}"),
        (f"[{a},{b})", f"[{a},{b})", f"({a},{b})"),
        (f"(-\\infty, {a}]", f"(-\\infty,{a}]", f"(-\\infty,{a})"),
        (f"\\{{{a},{b},{a + b}\\}}", f"\\{{{a + b},{a},{b}\\}}", f"\\{{{a},{b}\\}}"),
        (f"({a},{b})", f"({a}, {b})", f"({b},{a})"),
        (f"{a}\\%", f"{a}\\%", f"{a + 1}\\%"),
        (f"{a}", f"{a}^\\circ", f"{a + 1}^\\circ"),
        (f"{a}", f"{a}\\text{{ cm}}", f"{a + 1}\\text{{ cm}}"),
        (f"{a}", f"x = {a}", f"x = {a + 1}"),
        (f"{a * 1000 + b}", f"\\${a},{b:03d}", f"\\${a + 1},{b:03d}"),
        (f"2^{{{e}}}", str(2**e), str(2 ** (e + 1))),
        (f"\\frac{{{a}}}{{{b}}}", f"\\tfrac{{{a}}}{{{b}}}", f"\\tfrac{{{b}}}{{{a}}}"),
    )
    return rng.choice(cases)


def _latex_pair(rng: random.Random) -> BenchPair:
    gold, right, wrong = _latex_case(rng)
    answer = right if rng.random() >= WRONG_SHARE else wrong
    return BenchPair(_render(rng, answer), gold, "latex")


_HOSTILE_RESPONSES = (
    "\\boxed{9^{9^{9^{9}}}}",
    "\\boxed{__import__('os').system('true')}",
    "\\boxed{" + "(" * 5000 + "1" + ")" * 5000 + "}",
    "x" * 1_000_000,
    "\\boxed{\x001\x00}",
    "\\boxed{{{{1",
    "\\boxed{１２}",
    "\\boxed{}",
    "\\boxed{" + "2^{" * 100 + "2" + "}" * 100 + "}",
    "Answer: __import__('os').getcwd()",
)


def _hostile_pair(rng: random.Random) -> BenchPair:
    return BenchPair(rng.choice(_HOSTILE_RESPONSES), str(rng.randint(1, 20)), "hostile", hostile=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    run_verify_bench(n_pairs=args.pairs, out_dir=args.out, workers=args.workers, seed=args.seed)


if __name__ == "__main__":
    main()
