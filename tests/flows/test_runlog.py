"""Quiet runs: library noise from Python, C and child processes goes to the run's log, our lines to the terminal."""

import os
import subprocess
import sys

import pytest

NOISY_RUN = r"""
import os, subprocess, sys, warnings
from rlep.flows.runlog import run_log
run_dir = sys.argv[1]
with run_log(run_dir):
    os.makedirs(run_dir, exist_ok=True)
    print("ours: progress 1/2")
    os.write(1, b"NUMA binding: thread 0 -> cpu 0\n")  # C-level stdout
    os.write(2, b"Triton is installed\n")  # C-level stderr
    subprocess.run([sys.executable, "-c", "import sys; print('child stdout noise'); sys.stderr.write('child stderr "
        "noise\\n')"])
    warnings.warn("vllm FutureWarning noise", FutureWarning)
    sys.stderr.write("Loading safetensors checkpoint shards: 100%|##########|\n")  # a tqdm bar
    print("warning: ours, shown", file=sys.stderr)
    # Prefect's logging, set up inside the run as in a flow run (its console handler binds the run's stderr),
    # writes records in its own format: ours shown by their message, a library's not
    from prefect.logging.configuration import setup_logging
    setup_logging(incremental=False)
    import logging
    logging.getLogger("rlep.tasks.training.loop.prompts").warning("warning: ours through Prefect")
    logging.getLogger("vllm.config").warning("warning: a library's, through Prefect")
print("ours: done")
"""
NOISE = [
    "NUMA binding",
    "Triton is installed",
    "child stdout noise",
    "child stderr noise",
    "FutureWarning noise",
    "Loading safetensors",
    "a library's, through Prefect",
]


def test_noise_goes_to_the_log_and_our_lines_to_the_terminal(tmp_path):
    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-c", NOISY_RUN, str(run_dir)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    terminal = done.stdout + done.stderr
    assert [n for n in NOISE if n in terminal] == []
    assert "ours: progress 1/2" in done.stdout and "ours: done" in done.stdout
    assert "warning: ours, shown" in done.stderr
    assert "\nwarning: ours through Prefect\n" in done.stderr  # the message alone, as without Prefect
    log = (run_dir / "rlep.log").read_text()
    assert [n for n in NOISE if n not in log] == [] and "warning: ours, shown" in log
    assert "WARNING | rlep.tasks.training.loop.prompts - warning: ours through Prefect" in log  # Prefect's own line


# A record of ours however the root's handlers write it: one line on the terminal (its message), and in the log.
OWN_LOGGING = {
    "no handler": "",  # logging's last resort: the message into the run's stderr
    "json lines": "h = logging.StreamHandler(sys.stderr); "
    'h.setFormatter(logging.Formatter(\'{"level": "%(levelname)s", "msg": "%(message)s"}\')); '
    "logging.getLogger().addHandler(h)",
    "message alone": "h = logging.StreamHandler(sys.stderr); logging.getLogger().addHandler(h)",
    "to the descriptor": "h = logging.StreamHandler(open(2, 'w', closefd=False)); "
    "h.setFormatter(logging.Formatter('%(name)s: %(message)s')); logging.getLogger().addHandler(h)",
}


@pytest.mark.parametrize("setup", OWN_LOGGING.values(), ids=OWN_LOGGING.keys())
def test_a_warning_record_of_ours_reaches_the_terminal_once_whatever_the_logging_format(tmp_path, setup):
    run_dir = tmp_path / "run"
    code = (
        "import logging, os, sys\nfrom rlep.flows.runlog import run_log\n"
        f"with run_log({str(run_dir)!r}):\n"
        "    os.makedirs(sys.argv[1], exist_ok=True)\n"
        f"    {setup or 'pass'}\n"
        "    logging.getLogger('rlep.tasks.collect').warning('warning: 3 rows skipped')\n"
        "    logging.getLogger('rlep.tasks.collect').warning('not for the terminal')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(run_dir)], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stderr.splitlines() == ["warning: 3 rows skipped"]
    log = (run_dir / "rlep.log").read_text()
    assert "warning: 3 rows skipped" in log and "not for the terminal" in log


def _in_run_log(run_dir, *body: str, tmpdir=None) -> subprocess.CompletedProcess:
    """Run `body` (lines of Python, `os`, `shutil` and `signal` imported) in a fresh process inside
    `run_log(run_dir)`, with TMPDIR=`tmpdir` when given."""
    lines = "".join(f"    {line}\n" for line in body)
    code = f"from rlep.flows.runlog import run_log\nimport os, shutil, signal\nwith run_log({str(run_dir)!r}):\n{lines}"
    env = {**os.environ, "TMPDIR": str(tmpdir)} if tmpdir else None
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)


def test_a_run_that_made_no_directory_leaves_no_log(tmp_path):
    done = _in_run_log(tmp_path / "none", "os.write(2, b'noise\\n')")
    assert done.returncode == 0 and "noise" not in done.stderr
    assert not (tmp_path / "none").exists()


def test_the_temporary_log_of_a_killed_run_is_removed_by_the_next_run(tmp_path):
    """A run killed before it made its directory cannot remove its temporary log; the next run removes the logs
    of dead processes and keeps those of live ones."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    killed = _in_run_log(
        tmp_path / "none", "os.write(2, b'noise\\n')", "os.kill(os.getpid(), signal.SIGKILL)", tmpdir=temp
    )
    assert killed.returncode == -9
    (orphan,) = temp.glob("rlep-run-*.log")
    assert orphan.read_text() == "noise\n"
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as alive:
        try:
            running = temp / f"rlep-run-{alive.pid}-abcd.log"
            running.write_text("a run still going\n")
            unrelated = temp / "rlep-notes.log"
            unrelated.write_text("not ours\n")
            kept = [running.name, unrelated.name]
            if os.getuid() == 0:  # another user's log of a dead run is theirs to remove (a shared /tmp)
                others = temp / orphan.name.replace("rlep-run-", "rlep-run-1").replace(".log", "-other.log")
                others.write_text("someone else's\n")
                os.chown(others, 12345, 12345)
                kept.append(others.name)
            assert _in_run_log(tmp_path / "none", "pass", tmpdir=temp).returncode == 0
            assert sorted(p.name for p in temp.iterdir()) == sorted(kept)
        finally:
            alive.kill()


def test_a_run_keeps_its_lines_when_a_tmp_cleaner_removed_its_temporary_log(tmp_path):
    temp = tmp_path / "tmp"
    temp.mkdir()
    run_dir = tmp_path / "run"
    done = _in_run_log(
        run_dir,
        "os.write(2, b'written before the clean-up\\n')",
        f"[p.unlink() for p in __import__('pathlib').Path({str(temp)!r}).glob('rlep-run-*.log')]",
        f"os.mkdir({str(run_dir)!r})",
        tmpdir=temp,
    )
    assert done.returncode == 0, done.stderr
    assert (run_dir / "rlep.log").read_text() == "written before the clean-up\n"


def test_a_run_killed_midway_in_a_directory_that_existed_keeps_its_log(tmp_path):
    """A resumed run (a long study's next session) logs straight into its directory: killed, its lines stay."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "rlep.log").write_text("earlier session\n")
    done = _in_run_log(run_dir, "os.write(2, b'vllm noise before the kill\\n')", "os.kill(os.getpid(), signal.SIGKILL)")
    assert done.returncode == -9 and "noise" not in done.stderr
    assert (run_dir / "rlep.log").read_text() == "earlier session\nvllm noise before the kill\n"


def test_a_run_that_makes_its_existing_directory_again_keeps_its_log_there(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "rlep.log").write_text("earlier\n")
    done = _in_run_log(
        run_dir,
        "os.write(2, b'before\\n')",
        f"shutil.rmtree({str(run_dir)!r})",
        f"os.mkdir({str(run_dir)!r})",
        "os.write(2, b'after\\n')",
    )
    assert done.returncode == 0, done.stderr
    assert (run_dir / "rlep.log").read_text() == "before\nafter\n"


def test_quiet_runs_switch_off_the_hub_and_transformers_progress_bars():
    # Bars such as "Writing model shards" at every checkpoint; --verbose keeps them.
    code = (
        "import os, sys\nfrom rlep.flows.cli import _quiet_libraries\n"
        "if sys.argv[1] == 'quiet':\n    _quiet_libraries()\n"
        "from transformers.utils import logging\nprint(logging.is_progress_bar_enabled())"
    )
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    runs = {
        mode: subprocess.run(
            [sys.executable, "-c", code, mode], capture_output=True, text=True, check=True, env=env
        ).stdout.strip()
        for mode in ("quiet", "verbose")
    }
    assert runs == {"quiet": "False", "verbose": "True"}


def test_a_handler_that_kept_the_run_stderr_writes_to_the_terminal_afterwards():
    # Prefect's console handler binds sys.stderr when it starts inside a run; after the run its writes must not
    # fail on the closed log (they broke every later flow of an in-process caller).
    code = (
        "import logging, sys\nfrom rlep.flows.runlog import run_log\nwith run_log(None):\n"
        "    handler = logging.StreamHandler(sys.stderr)\n"
        "handler.emit(logging.makeLogRecord({'msg': 'after the run'}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "after the run" in done.stderr and "Error" not in done.stderr
