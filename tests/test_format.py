"""One line length, enforced: the tree is as `ruff format` leaves it, and no line the formatter cannot split (a long
string, comment or docstring line) is longer (`ruff check --select E501`; pyproject's [tool.ruff])."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


TREE = ["flows", "tasks", "verifiers", "data", "tests"]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed (pip install -e .[dev])")
    return subprocess.run([ruff, *args, *TREE], cwd=REPO, capture_output=True, text=True)


def test_the_code_is_formatted():
    done = _ruff("format", "--check")
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_line_is_longer_than_the_line_length():
    done = _ruff("check", "--select", "E501")
    assert done.returncode == 0, done.stdout + done.stderr
