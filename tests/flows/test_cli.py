"""The command line as a user meets it: help, fast start, clear errors with exit code 2, nothing written."""

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pyarrow.parquet as pq
import pytest
from conftest import judged_row, write_rows
from pydantic import ValidationError

from rlep.data.sources import load_problems
from rlep.flows.cli import USER_ERRORS, main
from rlep.tasks.settings.source import problem_source
from rlep.tasks.settings.train import TrainConfig


def _run(*args):
    return subprocess.run([sys.executable, "-m", "rlep.flows.cli", *args], capture_output=True, text=True, timeout=120)


def test_help_lists_the_subcommands():
    out = _run("--help").stdout
    for command in (
        "problems",
        "tiny-model",
        "collect",
        "train",
        "eval",
        "pipeline",
        "inspect",
        "pool",
        "bench",
        "show-config",
    ):
        assert command in out


def test_building_the_cli_imports_no_heavy_library():
    code = (
        "import sys, rlep.flows.cli as cli; cli.build_parser(); print(sorted(m for m in ('torch', 'vllm', "
        "'prefect', 'sympy') if m in sys.modules))"
    )
    assert _run_code(code) == "[]"


def test_writing_and_inspecting_problems_and_pools_loads_no_torch(tmp_path):
    """`rlep problems` and `rlep inspect` run without torch (nor vLLM, Prefect or sympy): the error handling that
    every command shares used to import torch for one error class, a second of `rlep inspect`'s two."""
    problems, pool = tmp_path / "problems.jsonl", tmp_path / "pool.parquet"
    write_rows(pool, [judged_row(p, f"\\boxed{{{p.answer}}}") for p in load_problems(problem_source(limit=4))])
    code = (
        "import contextlib, io, sys\n"
        "from rlep.flows.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    codes = [main(['problems', '--limit', '5', '--out', {str(problems)!r}]),\n"
        f"             main(['inspect', {str(pool)!r}])]\n"
        "print(codes, sorted(m for m in ('torch', 'vllm', 'prefect', 'sympy') if m in sys.modules))"
    )
    assert _run_code(code) == "[0, 0] []"


def test_each_user_error_is_found_where_the_cli_looks_it_up():
    for module, name in USER_ERRORS:
        error = getattr(importlib.import_module(module), name)
        assert isinstance(error, type) and issubclass(error, Exception), (module, name)


@pytest.mark.parametrize("command", ["inspect", "train"])
def test_an_error_of_a_module_loaded_by_the_command_is_one_line(command, fixture_model, tmp_path, capsys):
    """Each command loads the module whose error it raises while it runs, after `_run` began (`rlep inspect`: the
    store's; `rlep train --resume`: the checkpoint module's). Either error is still one line."""
    if command == "inspect":
        (tmp_path / "junk.parquet").write_text("junk")
        argv, message = [str(tmp_path / "junk.parquet")], f"{tmp_path / 'junk.parquet'}: unreadable Parquet file: "
    else:
        settings = TrainConfig(model=fixture_model, out=str(tmp_path)).model_dump_json()
        (tmp_path / "train_config.json").write_text(settings)
        argv = ["--no-prefect", "--resume", str(tmp_path)]
        message = f"--resume {tmp_path}: no complete checkpoint under {tmp_path / 'checkpoints'}"
    assert main([command, *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"rlep {command}: error: {message}"), err


def _run_code(code):
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout.strip()


def test_problems_command_writes_jsonl_and_parquet(tmp_path):
    assert main(["problems", "--split", "test", "--limit", "25", "--out", str(tmp_path / "p.parquet")]) == 0
    assert pq.read_table(tmp_path / "p.parquet").num_rows == 25
    assert main(["problems", "--split", "train", "--limit", "5", "--out", str(tmp_path / "p.jsonl")]) == 0
    assert len((tmp_path / "p.jsonl").read_text().splitlines()) == 5


def test_problems_command_says_the_rows_it_skipped_once(tmp_path, capsys, caplog):
    source = tmp_path / "some.jsonl"
    source.write_text('{"problem": "1+1", "answer": "2"}\n{"problem": "", "answer": "3"}\n')
    out = tmp_path / "p.jsonl"
    assert main(["problems", "--source", str(source), "--invalid-rows", "skip", "--out", str(out)]) == 0
    said = capsys.readouterr()
    logged = [record.getMessage() for record in caplog.records]
    assert said.out.startswith(f"wrote 1 problems to {out} ({source}: 2 rows")
    assert "skipped 1 without a usable problem or answer (empty problem: 1)" in said.out
    assert (said.out + said.err + "".join(logged)).count("skipped 1") == 1


def test_a_run_says_the_rows_its_source_skipped_once(fixture_model, tmp_path):
    """The inputs' check before the model loads reads the source too: only the run's own reading says what it
    skipped (the terminal showed the line twice, with Prefect and without)."""
    source = tmp_path / "some.jsonl"
    source.write_text('{"problem": "1+1", "answer": "2"}\n{"problem": "", "answer": "3"}\n')
    run = ("--source", str(source), "--invalid-rows", "skip", "--engine", "transformers", "--max-tokens", "4")
    done = _run("eval", "--no-prefect", "--model", fixture_model, *run, "--out", str(tmp_path / "eval"))
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("skipped 1 without a usable problem or answer (empty problem: 1)") == 1, done.stderr


def test_the_readmes_problems_command_runs_as_written(tmp_path, capsys):
    """The commands table's `rlep problems` row, with and without each optional part, on tiny-math and on a file
    without a split column (which it says refuses `--split`)."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    row = re.search(r"^\| `(rlep problems [^`]*)`", readme, re.MULTILINE).group(1)
    assert row == "rlep problems [--source FILE\\|hf:NAME] [--split test] [--limit N] --out FILE"
    command, *plain = re.sub(r"\[[^]]*\] ", "", row).split()[1:]
    (tmp_path / "mine.jsonl").write_text('{"problem": "1+1", "answer": "2"}\n{"problem": "2+2", "answer": "4"}\n')
    fill = {"FILE": str(tmp_path / "out.jsonl")}
    source, limit = ["--source", str(tmp_path / "mine.jsonl")], ["--limit", "2"]
    cases = (([], 0), (limit, 0), ([*limit, "--split", "test"], 0), (source, 0), ([*source, "--split", "test"], 2))
    for extra, code in cases:
        assert main([command, *extra, *(fill.get(word, word) for word in plain)]) == code, extra
    assert "mine.jsonl has no split column" in capsys.readouterr().err


def test_bad_values_exit_2_naming_the_field(tmp_path, capsys):
    assert main(["problems", "--limit", "0", "--out", str(tmp_path / "p.jsonl")]) == 2
    assert "limit: Input should be greater than or equal to 1" in capsys.readouterr().err
    assert main(["problems", "--source", str(tmp_path / "none.csv"), "--out", str(tmp_path / "p.jsonl")]) == 2
    assert "none.csv: no such file" in capsys.readouterr().err
    assert main(["train", "--replay", "rlep", "--out", str(tmp_path / "t")]) == 2
    assert "replay.pool" in capsys.readouterr().err
    assert main(["collect", "--min-correct", "9", "--samples-per-prompt", "4", "--out", str(tmp_path / "c")]) == 2
    assert "min_correct (9) > samples_per_prompt (4)" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["collect", "--model", "{missing}"], "model '{missing}': no such directory"),
        (["train", "--model", "{missing}"], "model '{missing}': no such directory"),
        (["eval", "--model", "{missing}"], "model '{missing}': no such directory"),
        (["eval", "--model", "{tmp}/p.jsonl"], "model '{tmp}/p.jsonl': a file, not a model directory"),  # was "no such"
        (["pipeline", "--collect-model", "{missing}"], "model '{missing}': no such directory"),
        (["pipeline", "--train-model", "{missing}"], "model '{missing}': no such directory"),
        (["pipeline", "--train-problems-source", "{tmp}/none.jsonl"], "{tmp}/none.jsonl: no such file"),
        (["pipeline", "--evaluate-problems-source", "{tmp}/none.jsonl"], "{tmp}/none.jsonl: no such file"),
        (["train", "--problems-source", "{tmp}/none.jsonl"], "{tmp}/none.jsonl: no such file"),
        (["eval", "--source", "{tmp}/none.jsonl"], "{tmp}/none.jsonl: no such file"),
        (
            ["collect", "--source", "{tmp}/p.jsonl", "--families", "add"],
            "problems.families: not a setting of kind 'file' (got ['add']); the kinds that have it: tiny-math",
        ),
        (
            ["train", "--problems-source", "hf:my/set", "--problems-levels", "2"],
            "problems.levels: not a setting of kind 'hf' (got [2]); the kinds that have it: tiny-math",
        ),
        (
            ["problems", "--source", "{tmp}/p.jsonl", "--seed", "3"],
            "seed: not a setting of kind 'file' (got '3'); the kinds that have it: tiny-math",
        ),
    ],
    ids=[
        "collect-model",
        "train-model",
        "eval-model",
        "eval-model-a-file",
        "pipeline-model",
        "pipeline-train-model",
        "pipeline-train-problems",  # issue 45: failed only after the base evaluation had run and written
        "pipeline-evaluate-problems",
        "train-problems",
        "eval-problems",
        "collect-families-of-a-file",
        "train-levels-of-a-dataset",
        "problems-seed-of-a-file",
    ],
)
def test_every_command_refuses_bad_input_before_writing_anything(tmp_path, capsys, args, message):
    (tmp_path / "p.jsonl").write_text('{"problem": "1+1=?", "answer": "2"}\n')
    fill = {"missing": str(tmp_path / "no" / "such" / "dir"), "tmp": str(tmp_path)}
    out = tmp_path / ("OUT.jsonl" if args[0] == "problems" else "OUT")
    argv = [a.format(**fill) for a in args] + ([] if args[0] == "problems" else ["--no-prefect"])
    assert main([*argv, "--out", str(out)]) == 2
    assert f"rlep {args[0]}: error: " in (err := capsys.readouterr().err) and message.format(**fill) in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.jsonl"]


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("train", "train.problems (run baseline/seed-0): {tmp}/none.jsonl: no such file"),  # which of 4 sources
        ("evaluate", "evaluate.problems (run baseline/seed-0): {tmp}/none.jsonl: no such file"),
        ("pool", "replay.pool: {tmp}/none.parquet: no pool file there"),  # an arm's own pool, not the plan's
    ],
)
def test_a_study_with_a_missing_input_is_refused_before_any_run(tmp_path, capsys, where, message):
    # Issue 45: a study (as a pipeline) checked its sources only when the run reading each one started.
    import yaml

    study = yaml.safe_load((Path(__file__).parents[2] / "flows/configs/study-hard-quick.yaml").read_text())
    if where == "pool":
        study["arms"]["rlep"]["replay"]["pool"] = str(tmp_path / "none.parquet")
    else:
        study[where]["problems"] = {"source": str(tmp_path / "none.jsonl")}
    study.update(out=str(tmp_path / "OUT"), runner={"kind": "local"})
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study))
    assert main(["study", "--config", str(tmp_path / "study.yaml"), "--no-prefect"]) == 2
    assert message.format(tmp=tmp_path) in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.yaml"]


@pytest.mark.parametrize("kind", ["pipeline", "study"])
def test_a_flow_run_from_the_ui_checks_its_sources_before_its_first_run(tmp_path, kind):
    # A deployment's run does not pass through the CLI's check: the flow makes it (its function body, here).
    import yaml

    from rlep.data.source_rows import ProblemSourceError
    from rlep.flows.options import build_config
    from rlep.flows.pipeline import pipeline_flow
    from rlep.flows.study import study_flow
    from rlep.tasks.settings.pipeline import PipelineConfig
    from rlep.tasks.study import StudyConfig

    model, flow, name = {
        "pipeline": (PipelineConfig, pipeline_flow, "demo.yaml"),
        "study": (StudyConfig, study_flow, "study-hard-quick.yaml"),
    }[kind]
    settings = yaml.safe_load((Path(__file__).parents[2] / "flows/configs" / name).read_text())
    settings["train"]["problems"] = {"source": str(tmp_path / "none.jsonl")}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({**settings, "out": str(tmp_path / "OUT")}))
    config = build_config(model, tmp_path / "config.yaml")
    with pytest.raises(ProblemSourceError, match="none.jsonl: no such file"):
        flow.fn(config)
    assert [p.name for p in tmp_path.iterdir()] == ["config.yaml"]


@pytest.mark.parametrize(
    ("command", "config", "meant"),
    [
        ("train", "demo.yaml", "pipeline"),
        ("study", "demo.yaml", "pipeline"),
        ("pipeline", "study-hard-quick.yaml", "study"),
        ("collect", "real-control.yaml", "study"),
    ],
)
def test_a_settings_file_of_another_command_is_named_as_such(tmp_path, capsys, command, config, meant):
    # It was a list of every top-level section as "not a setting" (1,340 characters for a study file).
    path = Path(__file__).parents[2] / "flows/configs" / config
    assert main([command, "--config", str(path), "--no-prefect", "--out", str(tmp_path / "OUT")]) == 2
    assert capsys.readouterr().err == (
        f"rlep {command}: error: {path}: the settings of `rlep {meant}`, not of this command: run "
        f"`rlep {meant} --config {path}`\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_the_answer_format_flag_is_spelled_the_same_in_every_command(capsys):
    # Issue 34: the README's `--answer-format boxed` was refused by collect and eval (`--problems-answer-format`).
    from rlep.flows.cli import build_parser
    from rlep.flows.options import flag_overrides

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    for command in ("problems", "collect", "eval"):
        key = "answer_format" if command == "problems" else "problems.answer_format"
        out = ["--out", "problems.jsonl"] if command == "problems" else []
        args = parser.parse_args([command, *out, "--source", "math.jsonl", "--answer-format", "boxed"])
        assert flag_overrides(args)[key] == "boxed"
        usage = commands[command].format_help()
        assert "--answer-format" in usage and "--problems-answer-format" not in usage
    for command in ("collect", "eval"):
        args = parser.parse_args([command, "--problems-answer-format", "gsm8k"])
        assert flag_overrides(args) == {"problems.answer_format": "gsm8k"}
        assert "note: --problems-answer-format is renamed --answer-format" in capsys.readouterr().err
        args = parser.parse_args([command, "--verifier-answer-format", "boxed"])
        assert flag_overrides(args) == {"verifier.answer_format": "boxed"}


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (
            ["train", "--answer-format", "boxed"],
            "; did you mean --problems-answer-format or --eval-problems-answer-format or --verifier-answer-format?",
        ),
        (["collect", "--samples-per-promt", "3"], "; did you mean --samples-per-prompt?"),
        (["pool", "export", "p", "--out", "o", "--intoo", "z"], "; did you mean --into?"),
        (  # a flag that both ends like it and is spelled nearly like it is named once
            ["pipeline", "--eval-problems-source", "x"],
            "; did you mean --train-eval-problems-source or --evaluate-problems-source or --train-problems-source?",
        ),
        (["train", "--zzz", "3"], " (`rlep train --help` lists its flags)"),
        (["eval", "--problems-limit", "2"], "; did you mean --limit?"),  # a flag that ends its words: eval's spelling
        # Set for each run by the pipeline (under --out; each arm's model evaluated): the flags were taken, ignored.
        (["pipeline", "--train-out", "x"], "; did you mean --out?"),
        (["pipeline", "--collect-out", "x"], "; did you mean --out?"),
        (["pipeline", "--evaluate-out", "x"], "; did you mean --out or --evaluate-top-p?"),
        (["pipeline", "--evaluate-model", "x"], " (`rlep pipeline --help` lists its flags)"),
    ],
)
def test_a_flag_the_command_lacks_is_one_line_naming_flags_spelled_alike(capsys, argv, hint):
    # Issue 45: `rlep train --answer-format boxed` was refused with no word of training's `--problems-answer-format`.
    with pytest.raises(SystemExit) as exited:
        main(argv)
    command = " ".join(argv[: 2 if argv[0] == "pool" else 1])
    unknown = " ".join(argv[-2:])
    assert exited.value.code == 2
    assert capsys.readouterr().err == f"rlep {command}: error: unrecognized arguments: {unknown}{hint}\n"


@pytest.mark.parametrize(
    ("argv", "err"),
    [
        (  # argparse took it for an abbreviation of several flags and listed them, none of them the source
            ["collect", "--problems", "my.jsonl"],
            "rlep collect: error: --problems is not a flag but a section of the settings: its flags are --source, "
            "--split, --limit, --problems-seed and 13 more (`rlep collect --help` shows its usage)",
        ),
        (
            ["eval", "--problems=my.jsonl"],
            "rlep eval: error: --problems is not a flag but a section of the settings: its flags are --source, "
            "--split, --limit, --problems-seed and 13 more (`rlep eval --help` shows its usage)",
        ),
        (
            ["train", "--eval-problems", "my.jsonl"],
            "rlep train: error: --eval-problems is not a flag but a section of the settings: its flags are "
            "--eval-problems-source, --eval-problems-split, --eval-problems-limit, --eval-problems-seed and 13 more "
            "(`rlep train --help` shows its usage)",
        ),
        (  # no flag begins with it: refused as unknown, the hint after
            ["train", "--loss", "grpo"],
            "rlep train: error: unrecognized arguments: --loss grpo; --loss is not a flag but a section of the "
            "settings: its flags are --objective, --clip-low, --clip-high, --dual-clip and 13 more",
        ),
        (
            ["pipeline", "--problems", "my.jsonl"],
            "rlep pipeline: error: unrecognized arguments: --problems my.jsonl; --problems is not a flag but a section "
            "of the settings in 3 places, beginning --collect-problems-source, --train-problems-source, "
            "--evaluate-problems-source",
        ),
        (  # not a section: argparse's own list stands
            ["collect", "--problem", "my.jsonl"],
            "rlep collect: error: ambiguous option: --problem could match --problems-seed, --problem-column, "
            "--problems-answer-format (`rlep collect --help` shows its usage)",
        ),
    ],
)
def test_a_section_typed_as_a_flag_is_named_with_its_flags(capsys, argv, err):
    # A user who read a configuration file's `problems:` typed `rlep collect --problems FILE` and was told it could
    # match --problems-seed or --problems-answer-format: not a word of `--source`.
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert capsys.readouterr().err == err + "\n"


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["train", "--engine", "foo"], "rlep train: error: argument --engine: invalid choice: 'foo'"),
        (["pool", "export"], "rlep pool export: error: the following arguments are required: pool, --out"),
        (["frob"], "rlep: error: argument COMMAND: invalid choice: 'frob'"),
    ],
)
def test_an_argparse_error_is_one_line_without_the_usage_block(capsys, argv, line):
    # Issue 45: argparse printed the command's whole usage (114 lines for `rlep train`) above the line that mattered.
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1 and err.startswith(line)
    assert err.endswith("--help` shows its usage)\n")


def test_the_sampling_flags_keep_their_names_in_every_command():
    # The settings moved into one `sampling:` section (issue 36); their flags are named as before it.
    from rlep.flows.cli import build_parser
    from rlep.flows.options import flag_overrides

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    values = ["0.5", "0.9", "7"]
    for command in ("collect", "train", "eval"):
        args = parser.parse_args([command, *sum(zip(["--temperature", "--top-p", "--max-tokens"], values), ())])
        assert flag_overrides(args) == {
            "sampling.temperature": "0.5",
            "sampling.top_p": "0.9",
            "sampling.max_tokens": "7",
        }
    usage = commands["pipeline"].format_help()
    for section in ("collect", "train", "evaluate"):
        flags = [f"--{section}-temperature", f"--{section}-top-p", f"--{section}-max-tokens"]
        assert all(flag in usage for flag in flags) and f"--{section}-sampling-" not in usage
        args = parser.parse_args(["pipeline", *sum(zip(flags, values), ())])
        assert flag_overrides(args) == {
            f"{section}.sampling.{name}": value for name, value in zip(("temperature", "top_p", "max_tokens"), values)
        }


def test_a_flows_parameters_of_the_earlier_layout_validate_as_todays():
    # What the Prefect UI or an older deployment sends: Prefect validates a flow's parameters with its model.
    from rlep.flows.train import train_flow
    from rlep.tasks.settings.engine import RolloutSampling
    from rlep.tasks.settings.train import AsymREObjective

    parameters = {"config": {"max_tokens": 12, "temperature": 0.5, "loss": {"objective": "asymre"}}}
    config = train_flow.validate_parameters(parameters)["config"]
    assert config.sampling == RolloutSampling(temperature=0.5, top_p=1.0, max_tokens=12)
    assert config.loss.objective == AsymREObjective()


def test_bench_async_refuses_bad_input_naming_itself_before_writing_anything(tmp_path, capsys):
    out = tmp_path / "OUT"
    assert main(["bench", "async", "--model", str(tmp_path / "no" / "such" / "dir"), "--out", str(out)]) == 2
    assert "rlep bench async: error: model" in capsys.readouterr().err
    assert main(["bench", "async", "--steps", "3", "--out", str(out)]) == 2
    assert "train.steps (3) must be at least skip_steps + 2 (4)" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_bench_sync_is_a_command_with_its_flags():
    # The weight-sync memory bench was reachable only as `python -m rlep.tasks.bench.sync` (issue 36).
    done = _run("bench", "sync", "--help")
    assert done.returncode == 0, done.stderr
    for flag in ("--model", "--mode", "--engine-dtype", "--bucket-mb", "--repeats", "--results"):
        assert flag in done.stdout
    assert "sync" in _run("bench", "--help").stdout


def test_show_config_round_trips(tmp_path, capsys):
    assert main(["show-config", "train"]) == 0
    path = tmp_path / "train.yaml"
    path.write_text(capsys.readouterr().out)
    assert main(["show-config", "pipeline"]) == 0
    from rlep.flows.options import build_config
    from rlep.tasks.settings.train import TrainConfig

    assert build_config(TrainConfig, path) == TrainConfig()
    capsys.readouterr()
    # The study's too: the file it prints is a study the loader reads back as the default one.
    assert main(["show-config", "study"]) == 0
    study = tmp_path / "study.yaml"
    study.write_text(capsys.readouterr().out)
    from rlep.tasks.study import StudyConfig

    assert build_config(StudyConfig, study) == StudyConfig()
    with pytest.raises(SystemExit):  # its help names the commands it takes
        main(["show-config", "--help"])
    assert "One of: collect, eval, pipeline, study, train." in capsys.readouterr().out


def test_collect_with_a_missing_model_creates_nothing(tmp_path, capsys):
    out = tmp_path / "OUT"
    assert (
        main(["collect", "--source", "tiny-math", "--model", str(tmp_path / "no" / "such" / "dir"), "--out", str(out)])
        == 2
    )
    assert "no/such/dir" in capsys.readouterr().err
    assert not out.exists()


def test_help_shows_the_defaults_that_apply_for_every_command():
    from rlep.flows.cli import _config_commands, build_parser

    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    checked = 0
    for name, (model, _) in _config_commands().items():
        defaults = model()  # what `rlep show-config NAME` prints
        for action in commands[name]._actions:
            if not action.dest.startswith("cfg:"):
                continue
            node, path = defaults, action.dest[len("cfg:") :].split(".")
            for part in path[:-1]:
                parent, node = node, getattr(node, part, None)
                if node is None and parent is not None:  # an optional section the default leaves unset (`lora`)
                    section = next(
                        t for t in get_args(type(parent).model_fields[part].annotation) if t is not type(None)
                    )
                    try:
                        node = section()  # its defaults are what applies once it is set
                    except ValidationError:  # its settings are required (`perturb: {reseed_at}`): none applies
                        break
            if node is None:
                assert action.help.endswith("[default: None]"), f"rlep {name} {action.option_strings[0]}"
                continue
            if path[-1] not in type(node).model_fields:  # a variant the default does not choose
                continue
            shown = action.help.replace("%%", "%").rsplit("[default: ", 1)[1][:-1]
            assert shown == repr(getattr(node, path[-1])), f"rlep {name} {action.option_strings[0]}"
            checked += 1
    assert checked > 200
    help_text = " ".join(commands["collect"].format_help().split())
    assert "[default: ['decimal']]" in help_text and "[default: [1]]" in help_text and "[default: 200]" in help_text


def test_a_run_shows_our_lines_and_keeps_library_output_in_its_log(fixture_model, tmp_path):
    out = tmp_path / "run"
    done = _run(
        "collect",
        "--no-prefect",
        "--model",
        fixture_model,
        "--engine",
        "transformers",
        "--limit",
        "6",
        "--samples-per-prompt",
        "2",
        "--min-correct",
        "1",
        "--shard-size",
        "3",
        "--max-tokens",
        "8",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    assert f"run directory: {out} (2 shards, 0 already done)" in done.stdout and f"{out / 'rlep.log'}" in done.stdout
    assert "Loading weights" not in done.stdout + done.stderr  # transformers' weight-loading bar
    assert (out / "rlep.log").is_file()
    # --verbose shows the libraries' output again (here the weight-loading bar the quiet run switched off; an
    # in-process quiet run earlier in this session may have set the switch in our own environment).
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    loud = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlep.flows.cli",
            "--verbose",
            "collect",
            "--no-prefect",
            "--model",
            fixture_model,
            "--engine",
            "transformers",
            "--limit",
            "6",
            "--samples-per-prompt",
            "2",
            "--min-correct",
            "1",
            "--shard-size",
            "3",
            "--max-tokens",
            "8",
            "--out",
            str(tmp_path / "loud"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert loud.returncode == 0 and "Loading weights" in loud.stdout + loud.stderr
