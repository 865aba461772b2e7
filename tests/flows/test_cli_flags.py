"""Every command's flags come from settings models (issue 36): a field is a flag, its description the help.

The few flags written out by hand are not settings (the --config file, how a command runs: --prefect,
--resume; show-config's command name). The benches' own `python -m` entry points, which run without rlep's
command line, make the same flags from the same models.
"""

import argparse
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from rlep.data.sources import ProblemsOutput
from rlep.flows.cli import build_parser
from rlep.flows.commands.studies import STUDY_FLAGS
from rlep.flows.deployments import SERVE_FLAGS
from rlep.flows.options import add_model_flags, build_from_flags
from rlep.tasks.bench import gpu, sync, update
from rlep.tasks.bench.gpu import GpuCheckConfig
from rlep.tasks.bench.sync import SyncBenchConfig
from rlep.tasks.bench.train import TrainBenchOutput
from rlep.tasks.bench.update import UpdateBenchConfig
from rlep.tasks.settings.bench import VerifyBenchConfig
from rlep.tasks.settings.inspect import InspectConfig
from rlep.tasks.settings.models import RealModelRequest, TinyModelBuild
from rlep.tasks.settings.pools import PoolExportConfig, PoolImportConfig
from rlep.tasks.settings.serve import ServerConfig
from rlep.verifiers import bench as verify_bench

# Hand-written flags that are not settings of an operation.
# How a command runs, not a setting of what it runs (`rlep study --report-only`: report, run nothing).
NOT_SETTINGS = {"--config", "--prefect", "--resume", "--report-only", "command_name"}

# command -> (model, its flags' namespace, the settings that have a flag: all when None)
COMMAND_MODELS = {
    "inspect": [(InspectConfig, "cfg", None)],
    "pool export": [(PoolExportConfig, "cfg", None)],
    "pool import": [(PoolImportConfig, "cfg", None)],
    "serve": [(None, "cfg", SERVE_FLAGS)],
    "ui": [(ServerConfig, "server", None), (None, "cfg", SERVE_FLAGS)],
    "tiny-model": [(TinyModelBuild, "build", None)],
    "real-model": [(RealModelRequest, "cfg", None)],
    "study": [(None, "cfg", STUDY_FLAGS)],
    "collect": [(None, "runner", {"kind", "address", "max_parallel"})],
    "problems": [(ProblemsOutput, "output", None)],
    "bench train": [(TrainBenchOutput, "bench", None)],
    "bench sync": [(SyncBenchConfig, "cfg", None)],
    "bench gpu": [(GpuCheckConfig, "cfg", None)],
    "bench verify": [(VerifyBenchConfig, "cfg", None)],
    "bench update": [(UpdateBenchConfig, "cfg", None)],
}


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(command path, its parser) for every command with no subcommands."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield " ".join(path), parser
    for sub in subs:
        for name, child in sub.choices.items():
            yield from _commands(child, (*path, name))


def _settings_and_others(parser: argparse.ArgumentParser):
    generated, others = set(), set()
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if ":" in action.dest:
            generated.add(action.dest)
        else:
            others.add(action.option_strings[0] if action.option_strings else action.dest)
    return generated, others


def test_every_flag_of_every_command_comes_from_a_settings_field_or_is_not_a_setting():
    commands = dict(_commands(build_parser()))
    assert set(COMMAND_MODELS) <= set(commands)
    for name, parser in commands.items():
        generated, others = _settings_and_others(parser)
        assert others <= NOT_SETTINGS, f"rlep {name}: hand-written flags {sorted(others - NOT_SETTINGS)}"
        for model, namespace, only in COMMAND_MODELS.get(name, []):
            mine = {dest.split(":", 1)[1] for dest in generated if dest.startswith(namespace + ":")}
            expected = only if only is not None else set(model.model_fields)
            assert expected <= mine, f"rlep {name}: settings without a flag {sorted(expected - mine)}"
            if only is not None:
                assert mine == only, f"rlep {name}: flags beyond the chosen settings {sorted(mine - only)}"


class _Inspect(InspectConfig):
    """`InspectConfig` with one more setting, as a new one would be added: one line."""

    columns: list[str] = Field(default_factory=list, description="Columns to show.")


def test_a_field_added_to_a_command_model_becomes_its_flag_with_its_description():
    parser = argparse.ArgumentParser()
    add_model_flags(parser, _Inspect)
    flag = parser._option_string_actions["--columns"]
    assert flag.help == "Columns to show. [default: []]"
    config = build_from_flags(_Inspect, parser.parse_args(["runs/x", "--json", "--columns", "a", "b"]))
    assert config == _Inspect(path="runs/x", as_json=True, rows=3, columns=["a", "b"])


class _Operation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="the operand", json_schema_extra={"cli_positional": True})
    kind: Literal["a", "b"] = Field("a", description="an optional operand", json_schema_extra={"cli_positional": True})
    out: str = Field(description="where to write")
    force: bool = Field(False, description="do it again", json_schema_extra={"cli_switch": True})
    schedule: bool = Field(
        True, description="on a schedule", json_schema_extra={"cli_flag": "no_schedule", "cli_switch": True}
    )
    cron: str = Field("0 3 * * *", description="when", json_schema_extra={"cli_metavar": "CRON"})


def test_operands_switches_and_required_flags_keep_their_argparse_spelling(capsys):
    parser = argparse.ArgumentParser(prog="op")
    add_model_flags(parser, _Operation)
    assert build_from_flags(_Operation, parser.parse_args(["p", "--out", "o"])) == _Operation(path="p", out="o")
    config = build_from_flags(_Operation, parser.parse_args(["p", "b", "--out", "o", "--force", "--no-schedule"]))
    assert (config.kind, config.force, config.schedule) == ("b", True, False)
    assert "--out OUT [--force] [--no-schedule] [--cron CRON] path [{a,b}]" in parser.format_usage()
    for argv, message in ((["p"], "--out"), (["--out", "o"], "path"), (["p", "c", "--out", "o"], "invalid choice")):
        with pytest.raises(SystemExit) as exited:
            parser.parse_args(argv)
        assert exited.value.code == 2 and message in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a switch takes no value
        parser.parse_args(["p", "--out", "o", "--force", "yes"])


def test_a_required_setting_is_no_required_flag_where_the_config_file_may_give_it():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config")

    class Settings(BaseModel):
        out: str = Field(description="where to write")

    add_model_flags(parser, Settings)
    assert parser.parse_args([]).config is None


@pytest.mark.parametrize("name, module", [("sync", sync), ("gpu", gpu), ("verify", verify_bench), ("update", update)])
def test_a_bench_takes_the_same_flags_from_rlep_and_from_its_module(name, module, monkeypatch):
    commands = dict(_commands(build_parser()))
    rlep_flags = {s for a in commands[f"bench {name}"]._actions for s in a.option_strings}
    seen = {}

    def stop(parser, argv=None):  # the module's parser, built, is all this test needs
        seen["parser"] = parser
        raise SystemExit(0)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", stop)
    with pytest.raises(SystemExit):
        module.main([])
    shown = {s for a in seen["parser"]._actions if a.help != argparse.SUPPRESS for s in a.option_strings}
    assert shown == rlep_flags  # a hidden flag (update's --request: one rank of a launched run) is the module's
