"""`rlep`: the command line of the rlep pipeline.

Every command that runs a stage takes `--config FILE.yaml` plus one flag per setting (see `--help` of
the command); flags override the file. `rlep show-config COMMAND` prints a complete YAML to start from.
A user error (bad value, missing file or column, a model that cannot be had) prints one message and exits with
code 2, before anything is written; Ctrl-C prints one line and exits with 130. This module is the argument parser
and `main`; the commands' flags and bodies are in rlep.flows.commands, one module per group of commands.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from rlep.flows.commands import benches, pools, serving, sources, studies, training
from rlep.flows.commands.common import UserError, add_command, config_from_args
from rlep.flows.interrupts import interrupted, interrupts_noted, typed_name
from rlep.flows.options import ConfigError, add_model_flags, dump_yaml, flag_overrides, setting_of

EXIT_USAGE = 2

# Offline by default: no telemetry from Prefect, vLLM or the HF libraries.
for _name, _value in (
    ("DO_NOT_TRACK", "1"),
    ("PREFECT_SERVER_ANALYTICS_ENABLED", "false"),
    ("VLLM_NO_USAGE_STATS", "1"),
    ("HF_HUB_DISABLE_TELEMETRY", "1"),
    ("TOKENIZERS_PARALLELISM", "false"),
):
    os.environ.setdefault(_name, _value)


# ---------------------------------------------------------------- parser


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors are one line: argparse prints the whole usage block first (over 100 lines
    for `rlep train`), which hides the line that says what was wrong. Subcommands inherit it."""

    def error(self, message: str):
        ambiguous = "ambiguous option: "  # argparse's words for a prefix of several flags: `collect --problems`
        if message.startswith(ambiguous) and (section := _section_flags(self, message[len(ambiguous) :].split()[0])):
            message = section
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (`{self.prog} --help` shows its usage)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="rlep",
        description="RL for LLM reasoning with experience replay: collect verified answers, replay them in GRPO.",
    )
    parser.add_argument(  # where library output goes, not a setting of any command
        "-v",
        "--verbose",
        action="store_true",
        help="Show library output (vLLM, torch, Prefect) on the terminal; otherwise a run keeps it in "
        "RUN_DIR/rlep.log.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sources.add_problems(sub)
    sources.add_tiny_model(sub)
    sources.add_real_model(sub)
    own_flags = {"train": training.add_train_flags, "collect": pools.add_collect_flags}
    for name, (model, runner) in _config_commands().items():
        doc = (model.__doc__ or "").strip().splitlines()[0]
        p = add_command(sub, name, doc, runner)
        p.add_argument(  # how the command runs (a flow or plain calls), not a setting of the run
            "--prefect",
            action=argparse.BooleanOptionalAction,
            default=True,
            help="Run as a Prefect flow (artifacts, UI); --no-prefect calls the functions directly.",
        )
        if name in own_flags:
            own_flags[name](p)
        add_model_flags(p, model)
    pools.add_inspect(sub)
    pools.add_pool(sub)
    serving.add_serve(sub)
    serving.add_ui(sub)
    benches.add_bench(sub)
    studies.add_study(sub)
    about = "Print the full default configuration of a command as YAML (a --config file to start from)."
    p = sub.add_parser("show-config", help=about, description=about)
    p.add_argument(  # which model: not a setting
        "command_name",
        choices=show_config_names(),
        metavar="COMMAND",
        help=f"One of: {', '.join(show_config_names())}.",
    )
    p.set_defaults(handler=_cmd_show_config)
    return parser


def _config_commands() -> dict[str, tuple[type, Callable]]:
    """Commands whose settings are one pydantic model: name -> (model, runner(args))."""
    from rlep.tasks.collect import CollectConfig
    from rlep.tasks.settings.evaluate import EvalConfig
    from rlep.tasks.settings.pipeline import PipelineConfig
    from rlep.tasks.settings.train import TrainConfig

    return {
        "collect": (CollectConfig, pools.run_collect),
        "train": (TrainConfig, training.run_train),
        "eval": (EvalConfig, training.run_eval),
        "pipeline": (PipelineConfig, studies.run_pipeline),
    }


def show_config_names() -> list[str]:
    """Commands whose whole configuration `rlep show-config` prints: the one-model commands and the study."""
    return sorted([*_config_commands(), "study"])


def _cmd_show_config(args: argparse.Namespace) -> int:
    if args.command_name == "study":
        from rlep.tasks.study import StudyConfig as model
    else:
        model, _ = _config_commands()[args.command_name]
    print(dump_yaml(model()), end="")
    return 0


def _quiet_libraries() -> None:
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    # ... but a flow's and a task's own log lines (ours, prints, states) at INFO: at WARNING they never reach the
    # run's Logs tab in the UI (a study run from its deployment had none). Their console copy is on stderr (rlep.log).
    os.environ.setdefault("PREFECT_LOGGING_LOGGERS_PREFECT_FLOW_RUNS_LEVEL", "INFO")
    os.environ.setdefault("PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL", "INFO")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # transformers' weight loading and saving bars
    logging.getLogger("vllm").setLevel(logging.WARNING)


def _run_dir(args: argparse.Namespace) -> Path | None:
    """Where a run command's log goes: its --resume or out directory (none while its settings do not validate)."""
    if getattr(args, "resume", None):  # a run directory the resume will accept; else none (it is refused at once)
        from rlep.data.run_layout import TrainRunLayout

        ok = args.config is None and TrainRunLayout(args.resume).config.is_file()
        return Path(args.resume) if ok else None
    if args.command == "bench":  # `bench async`: the directory of its runs
        from rlep.tasks.bench.async_train import AsyncBenchConfig

        try:
            return config_from_args(AsyncBenchConfig, args).train.out
        except (ConfigError, ValueError):
            return None
    if args.command == "study":  # the study directory: --out, else the file's `out`
        import yaml

        try:
            out = flag_overrides(args).get("out") or (yaml.safe_load(Path(args.config).read_text()) or {}).get("out")
        except (OSError, yaml.YAMLError, AttributeError):
            return None
        return Path(out) if out else None
    try:  # what building the settings says (a `warning:`) is said when the command builds them
        with contextlib.redirect_stderr(io.StringIO()):
            return config_from_args(_config_commands()[args.command][0], args).out
    except (ConfigError, ValueError):
        return None


def parse_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """`parser.parse_args`, but a flag the command does not have is refused in one line by the command itself, naming
    the flags it does have that are spelled alike (`rlep train --answer-format`: training's is
    `--problems-answer-format`)."""
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        command = parser
        while sub := next((a for a in command._actions if isinstance(a, argparse._SubParsersAction)), None):
            command = sub.choices[getattr(args, sub.dest)]
        hint = _close_flags(command, unknown) or f" (`{command.prog} --help` lists its flags)"
        command.exit(EXIT_USAGE, f"{command.prog}: error: unrecognized arguments: {' '.join(unknown)}{hint}\n")
    return args


def _close_flags(command: argparse.ArgumentParser, unknown: list[str]) -> str:
    """'; did you mean ...?' naming the command's flags that end with an unknown flag's words or are spelled
    nearly like it; empty when none is."""
    import difflib

    flags = [f for f in command._option_string_actions if f.startswith("--")]
    hints: list[str] = []
    for word in (u.split("=", 1)[0] for u in unknown if u.startswith("--")):
        if section := _section_flags(command, word):
            return f"; {section}"
        # a flag whose words end it, or that ends its words (`eval --problems-limit`: eval's is `--limit`)
        ending = [f for f in flags if f.endswith("-" + word[2:]) or word.endswith("-" + f[2:])]
        hints += ending + difflib.get_close_matches(word, flags, n=3, cutoff=0.8)
    hints = list(dict.fromkeys(hints))  # each once, in the order found
    return f"; did you mean {' or '.join(hints)}?" if hints else ""


def _section_flags(command: argparse.ArgumentParser, word: str) -> str:
    """'--problems is not a flag but a section of the settings: its flags are --source, ...' for a flag whose words
    name a section of the command's settings (a YAML's `problems:`), its flags in `--help`'s order; empty when they
    name none. A user who reads a configuration file types its section (`rlep collect --problems FILE`)."""
    word = word.split("=", 1)[0]
    name = word.removeprefix("--").replace("-", "_")
    sections: dict[str, list[str]] = {}
    for action in command._actions:
        path = (setting_of(action.dest) or "").split(".")
        if name in path[:-1] and action.help != argparse.SUPPRESS:
            sections.setdefault(".".join(path[: path.index(name) + 1]), []).append(action.option_strings[0])
    if len(sections) == 1:
        (flags,) = sections.values()
        more = f" and {len(flags) - 4} more" if len(flags) > 4 else ""
        return f"{word} is not a flag but a section of the settings: its flags are {', '.join(flags[:4])}{more}"
    if sections:
        firsts = ", ".join(flags[0] for flags in sections.values())
        return f"{word} is not a flag but a section of the settings in {len(sections)} places, beginning {firsts}"
    return ""


def main(argv: list[str] | None = None) -> int:
    args = None
    try:  # from the first import the parser makes: a Ctrl-C at once is one line too
        with interrupts_noted() as noted:
            try:
                args = parse_args(build_parser(), argv)
            except Exception:  # the commands' modules load here: an error a library made of a Ctrl-C
                if noted():
                    raise KeyboardInterrupt from None
                raise
        if not args.verbose:
            _quiet_libraries()
        return _run(args)
    except KeyboardInterrupt:  # Ctrl-C: one line, not a traceback (a model build removes its unfinished folder)
        return interrupted(_name(args) if args is not None else typed_name(sys.argv[1:] if argv is None else argv))


# The errors a user can fix, besides the command line's own (UserError, ConfigError): each is one line and exit
# code 2. They are looked up by module when an error reaches `_run`, in the modules loaded by then: a module never
# imported raised none of them, and importing one only to catch nothing would load torch (the checkpoint module's)
# into every command, a second of `rlep inspect`'s two.
USER_ERRORS = (
    ("rlep.data.pool", "PoolError"),
    ("rlep.data.prompting", "PromptError"),
    ("rlep.data.sources", "ProblemSourceError"),
    ("rlep.data.store", "StoreError"),
    ("rlep.tasks.engines", "EngineUnavailable"),
    ("rlep.tasks.models", "ModelNotFound"),
    ("rlep.tasks.training.backends.checkpoint", "CheckpointError"),
    ("rlep.tasks.training.backends.lora", "LoraTargetError"),
)


def _user_errors() -> tuple[type[BaseException], ...]:
    loaded = [(sys.modules.get(module), name) for module, name in USER_ERRORS]
    return (UserError, ConfigError, *(getattr(module, name) for module, name in loaded if module is not None))


def _run(args: argparse.Namespace) -> int:
    """The command's handler, in its run log where it has one; a user error is one line and exit code 2."""
    try:
        logged = args.command in (*_config_commands(), "study") or (args.command == "bench" and args.bench == "async")
        if args.verbose or not logged:
            return args.handler(args)
        from rlep.flows.runlog import run_log

        with run_log(_run_dir(args)) as log:
            code = args.handler(args)
        if log is not None and log.is_file():
            print(f"library output (vLLM, torch, ...): {log}; rlep --verbose {args.command} shows it here")
        return code
    except _user_errors() as err:  # looked up once an error is raised, when the modules that raise are loaded
        print(f"rlep {_name(args)}: error: {err}", file=sys.stderr)
        return EXIT_USAGE


def _name(args: argparse.Namespace) -> str:
    """The command as typed, `rlep bench async: error: ...`, `rlep pool export: error: ...`."""
    return " ".join(filter(None, (args.command, getattr(args, "bench", None), getattr(args, "pool_command", None))))


if __name__ == "__main__":
    from rlep.tasks.quick_exit import run_then_exit

    sys.exit(run_then_exit(main))
