"""tasks/quick_exit.py: a process whose main returned ends without the interpreter's teardown, but after everything
the interpreter would have done before it (threads, atexit handlers, logs, buffered output); one whose main raised
ends the usual way. The project's entry points register nothing before it that it would skip."""

import subprocess
import sys
import textwrap

import pytest

from rlep.tasks.quick_exit import RUN_HERE

SCRIPT = textwrap.dedent(
    """
    import atexit, logging, logging.handlers, multiprocessing.util, sys, threading, time
    from pathlib import Path

    from rlep.tasks.quick_exit import run_then_exit

    out = Path(sys.argv[1])
    multiprocessing.util.Finalize(None, lambda: (out / "mp-finalizer").touch(), exitpriority=0)

    class Teardown:
        def __del__(self):
            sys.stderr.write("teardown ran\\n")

    KEPT = Teardown()  # a module global: deleted only by the interpreter's teardown

    def main():
        log = logging.getLogger("quick")
        # held in memory until logging's shutdown closes it (capacity 100 records, never reached)
        log.addHandler(logging.handlers.MemoryHandler(100, target=logging.FileHandler(out / "log.txt")))
        log.warning("logged")
        sys.stdout.write("written, not flushed")  # a pipe: block-buffered
        atexit.register(lambda: (out / "atexit").touch())
        threading.Thread(target=lambda: (time.sleep(0.3), (out / "thread").touch())).start()
        if sys.argv[2] == "raise":
            raise RuntimeError("main failed")
        return {"code": 3, "none": None}[sys.argv[2]]

    sys.exit(run_then_exit(main))
    """
)


def _run(tmp_path, how: str) -> subprocess.CompletedProcess:
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    return subprocess.run([sys.executable, str(script), str(tmp_path), how], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("how, code", [("code", 3), ("none", 0)])
def test_a_returned_main_exits_with_its_code_after_threads_handlers_and_flushes_but_no_teardown(tmp_path, how, code):
    done = _run(tmp_path, how)
    assert done.returncode == code, done.stderr
    assert done.stdout == "written, not flushed"
    assert (tmp_path / "log.txt").read_text() == "logged\n"
    assert (tmp_path / "thread").exists() and (tmp_path / "atexit").exists()
    assert (tmp_path / "mp-finalizer").exists()  # multiprocessing's exit handler, registered before, run here
    assert "teardown ran" not in done.stderr  # the mechanism acts: the module's global was never deleted


def test_a_main_that_raises_ends_the_usual_way(tmp_path):
    done = _run(tmp_path, "raise")
    assert done.returncode == 1 and "RuntimeError: main failed" in done.stderr
    assert "teardown ran" in done.stderr and (tmp_path / "atexit").exists() and (tmp_path / "thread").exists()


@pytest.mark.parametrize(
    "module",
    [
        "rlep.flows.entry",
        "rlep.flows.cli",
        "rlep.tasks.training.generation.generator_worker",
        "rlep.tasks.training.backends.launch",
        "rlep.tasks.bench.async_train",
    ],
)
def test_an_entry_point_registers_no_exit_handler_that_would_be_skipped(module):
    """Importing the module (what runs before its `__main__` block calls run_then_exit) registers only handlers
    that run_then_exit runs itself."""
    probe = textwrap.dedent(
        f"""
        import atexit
        registered, register = [], atexit.register

        def noted(f, *args, **kwargs):
            registered.append(f"{{f.__module__}}.{{f.__qualname__}}")
            return register(f, *args, **kwargs)

        atexit.register = noted
        import {module}
        print("\\n".join(registered))
        """
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert set(done.stdout.split()) <= RUN_HERE, done.stdout
