"""The `rlep` console script. It imports the command line inside its own Ctrl-C handling: loading
rlep.flows.cli takes a tenth of a second or more (argparse, pydantic, the commands' modules), and a Ctrl-C then,
before `cli.main` can catch anything, would otherwise print a traceback. Standard library only, so that the window
left (the interpreter's start and this module's import) is a few milliseconds."""

from __future__ import annotations

import sys

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command Ctrl-C stopped


def main() -> int:
    try:
        from rlep.flows.cli import main as run
    except KeyboardInterrupt:
        return interrupted(typed_name(sys.argv[1:]))
    return run()


def interrupted(name: str) -> int:
    """The one line a Ctrl-C prints, and the exit code."""
    print(f"rlep {name}: interrupted", file=sys.stderr)
    _forget_the_interrupt()
    return EXIT_INTERRUPTED


def typed_name(argv: list[str]) -> str:
    """The command's name before the arguments are parsed: the first words that are not flags (`rlep`'s own flags
    take no value, so the first is the command)."""
    words = [word for word in argv if not word.startswith("-")]
    return " ".join(words[: 2 if words[:1] == ["bench"] else 1])


def _forget_the_interrupt() -> None:
    """Python 3.11 marks a KeyboardInterrupt that left code run by `exec` of a string as unhandled even when it is
    caught (Ctrl-C during an import, where dataclasses make their methods that way), and a module run by
    `python -m` then ends by SIGINT (exit status -2) instead of with its exit code; each exec of a string starts
    by clearing the mark."""
    exec("")  # noqa: S102 - an empty string: nothing runs
