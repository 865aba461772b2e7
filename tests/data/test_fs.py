"""Atomic directory writes: what a killed writer leaves behind is cleared by the next write of the same path."""

import subprocess
import sys

from rlep.data.fs import atomic_dir


def test_a_dead_writers_temporary_directory_is_removed_and_a_live_ones_kept(tmp_path):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for pid in (int(dead.stdout), live.pid):
            (tmp_path / f".step-2.{pid}.tmp").mkdir()
            (tmp_path / f".step-2.{pid}.tmp" / "model.safetensors").write_bytes(b"half")
        (tmp_path / ".step-3.1.tmp").mkdir()  # another path's: not this write's business
        with atomic_dir(tmp_path / "step-2") as tmp:
            (tmp / "done").write_text("yes")
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
            [f".step-2.{live.pid}.tmp", ".step-3.1.tmp", "step-2"]
        )
        assert (tmp_path / "step-2" / "done").read_text() == "yes"
    finally:
        live.kill()
        live.wait()
