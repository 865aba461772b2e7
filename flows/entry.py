"""The `rlep` console script. It imports the command line inside its own Ctrl-C handling: loading
rlep.flows.cli takes a tenth of a second or more (argparse, pydantic, the commands' modules), and a Ctrl-C then,
before `cli.main` can catch anything, would otherwise print a traceback. Standard library only (with
rlep.flows.interrupts and rlep.tasks.quick_exit), so that the window left (the interpreter's start and this
module's import) is a few milliseconds."""

from __future__ import annotations

import sys

from rlep.flows.interrupts import interrupted, interrupts_noted, typed_name
from rlep.tasks.quick_exit import run_then_exit


def main() -> int:
    """The command's exit code; the process then ends without the interpreter's teardown (tasks/quick_exit.py)."""
    return run_then_exit(_main)


def _main() -> int:
    with interrupts_noted() as noted:
        try:
            from rlep.flows.cli import main as run
        except BaseException as error:
            if isinstance(error, KeyboardInterrupt) or noted():
                return interrupted(typed_name(sys.argv[1:]))
            raise
    return run()
