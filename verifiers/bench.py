"""Benchmark: rlep's `verify_batch` against plain math-verify, on the same corpus, in the same run.

    python -m rlep.verifiers.bench --pairs 10000     # or: rlep bench verify --pairs 10000
    rlep bench verify --pairs 100000 --hostile-share 0.1 --skip-math-verify   # load test
    rlep bench verify --peer /path/to/Math-Verify     # Math-Verify's regression cases (verifiers.peer)

The corpus (seeded) mimics what the trainer verifies: tiny-math style answers (integers, negatives,
fractions written as `0.75`, `3/4` or `\\frac{3}{4}`, decimals) in the answer formats models use (boxed,
`Answer:`, `####`, "the answer is", bare last number, with and without `<think>`), about a third of them
wrong; a share of varied LaTeX (radicals, polynomials, intervals, sets, percent, units); and a 1% hostile
share by default (`--hostile-share`; power towers, injections, nested parentheses, a 1 MB response, NUL
bytes, ...).

Measured:
- ours: `verify_batch` over the whole corpus through the worker pool (started before timing, as in a
  long training run, but with empty caches), fed by two caller threads in slices so a progress bar
  can move;
- ours, benign only: the same without the hostile share, on fresh workers again; this is what the
  ratio compares;
- plain math-verify: `parse("\\boxed{" + gold + "}")`, `parse(response)`, `verify(...)` per pair in this
  process with its default settings (the gold wrapped in a box as verl's math-verify reward does), on the benign pairs
  only (a hostile pair can hang it: no process boundary).

Also reported, for load tests: peak RSS of this process (`ru_maxrss`) and of the workers (`VmHWM`, read
before the pool closes), and whether any worker process is left after the pool is closed.

Reported: verdicts/s of each, the ratio, agreement on benign pairs (with examples of disagreements),
false positives and false negatives of each against the corpus's truth by construction (`errors`),
p50/p99 of per-answer latency (our workers' time per answer; math-verify's wall time per pair), and the
verdict reasons. The JSON lands in `out_dir/verify-<timestamp>.json`.

The whole-corpus run uses `timeout_seconds=1.0` so that the slow hostile answers cost seconds, not
minutes; the benign run, which the ratio compares, uses the default VerifierConfig (5 s of CPU time,
math-verify's own default in wall-clock time), so that no benign answer is cut off by a tighter budget than
math-verify's.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import statistics
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

from pydantic import ValidationError
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from rlep.tasks.settings.bench import VerifyBenchConfig
from rlep.tasks.settings.verifier import VerifierConfig
from rlep.verifiers.api import verify_batch
from rlep.verifiers.bench_corpus import HOSTILE_SHARE, BenchPair, build_corpus
from rlep.verifiers.sandbox import close_shared_pools, shared_pool

BENCH_TIMEOUT_SECONDS = 1.0
SLICE = 250


def run_verify_bench(
    n_pairs: int = 10000,
    out_dir: Path = Path("bench/results"),
    workers: int | None = None,
    seed: int = 0,
    hostile_share: float = HOSTILE_SHARE,
    skip_math_verify: bool = False,
) -> dict:
    """Build the corpus, time both verifiers, print a summary and write it as JSON; return the report.

    `skip_math_verify` leaves plain math-verify out (a load test of 100k pairs would spend most of its
    time there); the speed-up and agreement are then not reported.
    """
    if not 0 <= hostile_share <= 1:
        raise ValueError(f"hostile_share must be in [0, 1], got {hostile_share}")
    console = Console()
    pairs = build_corpus(n_pairs, seed, hostile_share)
    benign = [pair for pair in pairs if not pair.hostile]
    config = VerifierConfig(workers=workers, timeout_seconds=BENCH_TIMEOUT_SECONDS)
    # The benign run that the ratio compares keeps the default timeout, as plain math-verify keeps its
    # own (5 s): a 1 s budget could time out a slow benign sympy answer, and each kill costs a worker
    # restart that has nothing to do with either verifier's speed.
    benign_config = VerifierConfig(workers=workers)

    with Progress(console=console, transient=True) as progress:
        # Each measured run gets fresh workers: the second run must not find the first one's answers
        # in the workers' caches.
        pool_start_seconds = _fresh_pool(config)
        ours_all, ours_all_seconds = _run_ours(pairs, config, progress, "ours, whole corpus")
        kills = shared_pool(config).kills
        worker_peak_rss_mb = _workers_peak_rss_mb(shared_pool(config).worker_pids())
        _fresh_pool(benign_config)
        ours_benign, ours_benign_seconds = _run_ours(benign, benign_config, progress, "ours, benign only")
        benign_kills = shared_pool(benign_config).kills
        worker_pids = shared_pool(benign_config).worker_pids()
        if skip_math_verify:
            plain, plain_latencies, plain_seconds = [v.correct for v in ours_benign], [0.0], float("nan")
        else:
            plain, plain_latencies, plain_seconds = _run_math_verify(benign, progress)
    close_shared_pools()
    workers_left = [pid for pid in worker_pids if _alive(pid)]

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
            "timeout_seconds": benign_config.timeout_seconds,
            "reasons": dict(Counter(v.reason for v in ours_benign)),
            "kills": benign_kills,
        },
        "math_verify": {
            "verdicts_per_second": plain_rate,
            "seconds": plain_seconds,
            "latency_p50_ms": _percentile(plain_latencies, 50) * 1e3,
            "latency_p99_ms": _percentile(plain_latencies, 99) * 1e3,
        },
        "hostile_share": hostile_share,
        "caller_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "worker_peak_rss_mb": worker_peak_rss_mb,
        "workers_left_after_close": workers_left,
        "math_verify_skipped": skip_math_verify,
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
        "errors": {
            "ours": error_counts(benign, [v.correct for v in ours_benign]),
            "math_verify": None if skip_math_verify else error_counts(benign, plain),
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


def error_counts(pairs: list[BenchPair], verdicts: list[bool]) -> dict:
    """False positives (a wrong answer judged correct: the worst error a reward can make) and false
    negatives (a right answer judged wrong), against each pair's truth by construction, with examples."""
    false_positives = [p for p, correct in zip(pairs, verdicts, strict=True) if correct and p.expected is False]
    false_negatives = [p for p, correct in zip(pairs, verdicts, strict=True) if not correct and p.expected]
    return {
        "false_positives": len(false_positives),
        "false_negatives": len(false_negatives),
        "false_positive_examples": [{"gold": p.gold, "response": p.response[:200]} for p in false_positives[:10]],
        "false_negative_examples": [{"gold": p.gold, "response": p.response[:200]} for p in false_negatives[:10]],
    }


def _workers_peak_rss_mb(pids: list[int]) -> float:
    """The largest peak resident set (`VmHWM`) among live worker processes, in MiB (Linux; else 0)."""
    peak = 0.0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                peak = max(peak, int(line.split()[1]) / 1024)
    return peak


def _alive(pid: int) -> bool:
    """Whether process `pid` still exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


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
    if not report["math_verify_skipped"]:
        console.print(
            f"speed-up (benign) {report['speedup_benign']:.1f}x, agreement (benign) {report['agreement_benign']:.2%}"
        )
    for name, errors in report["errors"].items():
        if errors is not None:
            console.print(
                f"{name} on benign pairs: {errors['false_positives']} false positives (wrong answers judged "
                f"correct), {errors['false_negatives']} false negatives (right answers judged wrong)"
            )
    console.print(
        f"hostile share {report['hostile_share']:.0%}, hostile reasons {report['ours']['hostile_reasons']}, "
        f"hostile max {report['ours']['hostile_max_seconds']:.2f} s, kills {report['ours']['kills']}"
    )
    console.print(f"benign run: reasons {report['ours_benign']['reasons']}, kills {report['ours_benign']['kills']}")
    console.print(
        f"peak RSS: caller {report['caller_peak_rss_mb']:.0f} MiB, worker {report['worker_peak_rss_mb']:.0f} MiB; "
        f"workers left after close: {len(report['workers_left_after_close'])}"
    )
    console.print(f"wrote {report['path']}")


def main(argv: list[str] | None = None) -> None:
    """`python -m rlep.verifiers.bench`: the flags of `rlep bench verify`, one per VerifyBenchConfig field (the
    verifiers run without rlep's command line, which makes them with flows.options.add_model_flags)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name, field in VerifyBenchConfig.model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        switch = extra.get("cli_switch")
        kind = {"action": "store_true"} if switch else {"metavar": extra.get("cli_metavar")}
        shown = "" if switch else f" [default: {field.default}]"
        flag = "--" + name.replace("_", "-")
        parser.add_argument(flag, dest=name, default=argparse.SUPPRESS, help=field.description + shown, **kind)
    try:
        config = VerifyBenchConfig.model_validate(vars(parser.parse_args(argv)))
    except ValidationError as err:
        parser.error("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors()))
    run_bench(config)


def run_bench(config: VerifyBenchConfig) -> dict:
    """Run the bench `config` asks for."""
    if config.peer is not None:
        from rlep.verifiers.peer import run_peer_bench

        return run_peer_bench(config.peer, out_dir=config.out, workers=config.workers)
    return run_verify_bench(
        n_pairs=config.pairs,
        out_dir=config.out,
        workers=config.workers,
        seed=config.seed,
        hostile_share=config.hostile_share,
        skip_math_verify=config.skip_math_verify,
    )


if __name__ == "__main__":
    main()
