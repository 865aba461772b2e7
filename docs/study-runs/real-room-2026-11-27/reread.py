"""Real-room's claims re-read with the statistics of issue 49 (untestable verdicts, the sd of the paired
differences and the smallest difference detectable at 80% power, Holm across the testable claims), from the
per-seed values its report printed: `.venv/bin/python docs/study-runs/real-room-2026-11-27/reread.py`.

The runs themselves (44 GB of checkpoints) stayed on the machine that ran them, so the study cannot be reported
again with `rlep study --report-only`; its report holds every seed's held-out accuracy at every evaluation step,
which is all the accuracy claims read. The charged-tokens claim is re-read from the per-seed tokens to 0.35 that
docs/results.md lists (the report's tables give them per arm, not per seed).
"""

import math
import re
from pathlib import Path

import pandas as pd

from rlep.tasks.settings.study import ClaimConfig
from rlep.tasks.study.stats import evaluate_claims, sign_test_decides, sign_test_p

REPORT = Path(__file__).with_name("report.md")
# Response reuse first replayed at step 13-19 (its runs' metrics), RLEP from step 1: the arms' `replayed` by step.
FIRST_REPLAY = {"baseline": math.inf, "rlep": 1, "reuse": 13}


def study_table() -> pd.DataFrame:
    """arm, seed, step, accuracy, replayed: the report's per-seed accuracies at every evaluation step."""
    line = re.compile(r"^\| (baseline|rlep|reuse) \| (\d+) \| 5 \| [^|]*\| [^|]*\| ([^|]*)\|", re.M)
    rows = [
        {
            "arm": arm,
            "seed": int(seed),
            "step": int(step),
            "accuracy": float(value),
            "replayed": int(int(step) >= FIRST_REPLAY[arm]),
        }
        for arm, step, per_seed in line.findall(REPORT.read_text())
        for seed, value in re.findall(r"(\d): ([0-9.]+)", per_seed)
    ]
    return pd.DataFrame(rows)


def main() -> None:
    study = study_table()
    assert len(study) == 3 * 7 * 5, f"{REPORT}: expected 3 arms x 7 steps x 5 seeds, read {len(study)} values"
    claims = [
        ClaimConfig(name=name, arm=arm, kind="accuracy_diff", step=step)
        for name, arm, step in [
            ("rlep-ahead-at-10", "rlep", 10),
            ("rlep-ahead-at-end", "rlep", 30),
            ("reuse-ahead-at-10", "reuse", 10),
            ("reuse-ahead-at-end", "reuse", 30),
        ]
    ]
    # The arms' settings differ only in `replay` (real-room.yaml), so before a first replay they are the same runs.
    table = evaluate_claims(study, claims, "baseline", differ_only_in_replay=lambda arm, against, step: True)
    columns = ["claim", "diff_mean", "diff_ci_low", "diff_ci_high", "diff_sd", "sdd_80", "p_value", "verdict"]
    print(table[[*columns, "holm_p", "holm_verdict"]].to_string(index=False, float_format="{:.3f}".format))
    # reuse-vs-rlep-per-charged-token: charged tokens to 0.35 per seed (reuse's seed 4 never reached it).
    reuse = [10_994, 11_407, 10_929, 19_523, math.inf]
    rlep = [45_990, 55_889, 48_983, 47_787, 42_794]
    wins, losses = sum(a < b for a, b in zip(reuse, rlep)), sum(a > b for a, b in zip(reuse, rlep))
    verdict = "testable" if sign_test_decides(len(reuse)) else f"untestable: {len(reuse)} paired seeds"
    print(
        f"reuse-vs-rlep-per-charged-token: reuse first in {wins} seeds, RLEP in {losses} (a never-reached seed "
        f"ranks last); sign test p {sign_test_p(wins, losses):.3f}; {verdict} (the sign test needs 6)"
    )


if __name__ == "__main__":
    main()
