"""One line length, enforced by the formatter: the tree is as `ruff format` leaves it (pyproject's [tool.ruff])."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_the_code_is_formatted():
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed (pip install -e .[dev])")
    done = subprocess.run(
        [ruff, "format", "--check", "flows", "tasks", "verifiers", "data", "tests"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
