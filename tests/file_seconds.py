"""How long each test file takes, so that the workers start the longest files first (conftest).

`make test` deals whole files to its worker processes (`--dist loadfile`) in the order conftest leaves them; a
long file dealt last runs alone at the end while the other worker idles. `file_seconds.json` holds each file's
seconds (its tests' setup, call and teardown, module fixtures included) from one whole run on 2 quiet cores; a
file it does not list is estimated from its tests. Rewrite it after a full run that printed every duration:

    .venv/bin/python -m pytest --durations=0 --durations-min=0 | tee /tmp/durations.log
    .venv/bin/python tests/file_seconds.py /tmp/durations.log "2 cores AMD EPYC, 2026-11-28"
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

TABLE = Path(__file__).with_name("file_seconds.json")
# A file the table does not list: this much per end-to-end (`slow`) test, a tenth of a second per other test.
SLOW_TEST_SECONDS = 30.0
QUICK_TEST_SECONDS = 0.1
# One line of `pytest --durations=0`: "12.34s call     tests/x/test_y.py::test_z[case]".
DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s+(?:setup|call|teardown)\s+(tests/\S+?\.py)::")


def load(table: Path = TABLE) -> dict[str, float]:
    """Measured seconds by file path relative to the repository (`tests/...`); empty if there is no table."""
    if not table.is_file():
        return {}
    return json.loads(table.read_text())["seconds"]


def estimate(path: str, tests: int, slow_tests: int, measured: dict[str, float]) -> float:
    """A file's expected seconds: measured, or estimated from how many of its tests are end-to-end."""
    if path in measured:
        return measured[path]
    return slow_tests * SLOW_TEST_SECONDS + (tests - slow_tests) * QUICK_TEST_SECONDS


def seconds_by_file(log_lines) -> dict[str, float]:
    """Sum a `pytest --durations=0 --durations-min=0` log's setup, call and teardown times by file."""
    total: dict[str, float] = defaultdict(float)
    for line in log_lines:
        found = DURATION.match(line)
        if found:
            total[found.group(2)] += float(found.group(1))
    return dict(total)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python tests/file_seconds.py DURATIONS_LOG 'MACHINE, DATE'", file=sys.stderr)
        return 2
    log, measured_on = Path(argv[0]), argv[1]
    seconds = seconds_by_file(log.read_text().splitlines())
    if not seconds:
        print(f"{log}: no duration lines (run pytest with --durations=0 --durations-min=0)", file=sys.stderr)
        return 1
    ordered = {path: round(s, 1) for path, s in sorted(seconds.items(), key=lambda item: -item[1])}
    TABLE.write_text(json.dumps({"measured_on": measured_on, "seconds": ordered}, indent=1) + "\n")
    print(f"{TABLE}: {len(ordered)} files, {sum(ordered.values()):,.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
