"""The JSON file every `rlep bench` command writes: what ran, on which machine, and its results."""

from __future__ import annotations

import json
import os
import platform
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


def write_bench_report(benchmark: str, out_dir: Path, **sections: Any) -> Path:
    """Write OUT_DIR/<benchmark>-<local time>.json with a timestamp, the machine and `sections`."""
    report = {
        "benchmark": benchmark,
        "created_at": datetime.now(timezone.utc).isoformat(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        **sections,
    }
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{benchmark}-{datetime.now():%Y%m%d-%H%M%S}.json"
    path.write_text(json.dumps(report, indent=2))
    return path
