"""Carry the real-control study (flows/configs/real-control.yaml) from one machine to the next.

The study takes about 12 hours on 2 quiet cores, more than one working session, and a session may end on one
machine and the next start on another with nothing of the first but the repository. So each finished run's record
is kept here, in `records/`, a copy of the study's `out` without its checkpoints, and copied back before the study
is started again: the study reuses a run whose record names its settings and starting weights (`tasks.reuse`),
checkpoints or not, and runs the rest.

    python docs/study-runs/real-control/records.py save      # runs/real-control -> records/ (finished runs only)
    python docs/study-runs/real-control/records.py restore   # records/ -> runs/real-control (nothing overwritten)

What is kept: claims.json (the plan as fixed when the study started, with its code version), every arm's finished
training run (run_record.json written) and every finished collection (manifest.json written) with the exploration
it was collected from. An exploration whose collection has not finished is not kept, nor is a run still training:
their checkpoints are what the next step needs, and they are gigabytes. The study pairs arms by seed, so each
seed's runs should be made on one machine: sessions.md says which machine made which runs.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RECORDS = HERE / "records"
OUT = Path("runs/real-control")  # the configuration's `out`, relative to the checkout the study runs in
LEFT_BEHIND = shutil.ignore_patterns("checkpoints", "*.lock", ".staging")


def finished_runs(out: Path) -> list[Path]:
    """The run directories of `out` (relative to it) that a restarted study would reuse."""
    kept = [run.relative_to(out) for run in sorted(out.glob("runs/*/seed-*")) if (run / "run_record.json").is_file()]
    for collect in sorted(out.glob("collect/seed-*")):
        if (collect / "manifest.json").is_file():
            kept.append(collect.relative_to(out))
            explore = out / "explore" / collect.name
            if (explore / "run_record.json").is_file():
                kept.append(explore.relative_to(out))
    return kept


def save(out: Path = OUT, records: Path = RECORDS) -> list[Path]:
    """Copy claims.json and the finished runs of `out` into `records` (a run kept before is copied again)."""
    if not (out / "claims.json").is_file():
        raise SystemExit(f"{out}/claims.json not found: run this from the checkout the study runs in")
    records.mkdir(parents=True, exist_ok=True)
    shutil.copy2(out / "claims.json", records / "claims.json")
    runs = finished_runs(out)
    for run in runs:
        shutil.rmtree(records / run, ignore_errors=True)
        shutil.copytree(out / run, records / run, ignore=LEFT_BEHIND)
    return runs


def restore(out: Path = OUT, records: Path = RECORDS) -> list[Path]:
    """Copy the kept runs into `out`, each only where `out` has no such run directory yet."""
    if not (records / "claims.json").is_file():
        raise SystemExit(f"{records}/claims.json not found: nothing has been saved yet")
    out.mkdir(parents=True, exist_ok=True)
    if not (out / "claims.json").is_file():
        shutil.copy2(records / "claims.json", out / "claims.json")
    restored = []
    for run in finished_runs(records):
        if not (out / run).exists():
            shutil.copytree(records / run, out / run)
            restored.append(run)
    return restored


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("save", "restore"):
        raise SystemExit(__doc__)
    done = save() if sys.argv[1] == "save" else restore()
    print(f"{sys.argv[1]}: {len(done)} runs" + "".join(f"\n  {run}" for run in done))
