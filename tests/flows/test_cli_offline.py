"""What a newcomer meets offline or with Ctrl-C, driven through the command line as a user runs it, with and without
Prefect: a hub model out of reach is one line at once, a Ctrl-C during the tiny model's build is one line, and a bad
source is refused before the build starts; nothing half-made is left behind (issue 45)."""

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from rlep.data.source_rows import PROXY_VARIABLES


def _env(tmp_path, **extra):
    """An environment with an empty tiny-model cache and Hugging Face cache under `tmp_path`, no proxy and no
    offline switch (each test sets what it needs)."""
    env = {k: v for k, v in os.environ.items() if k not in (*PROXY_VARIABLES, "HF_HUB_OFFLINE")}
    return {**env, "RLEP_CACHE_DIR": str(tmp_path / "rlep-cache"), "HF_HOME": str(tmp_path / "hf"), **extra}


def _closed_port() -> int:
    """A local port nothing listens on: a connection to it is refused at once (a probe fails without waiting)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rlep(args, env, cwd):
    return subprocess.run(
        [sys.executable, "-m", "rlep.flows.cli", *args], capture_output=True, text=True, timeout=120, env=env, cwd=cwd
    )


@pytest.mark.parametrize(
    ("command", "prefect"),
    [
        (["train", "--steps", "1"], "--no-prefect"),
        (["train", "--steps", "1"], "--prefect"),
        (["eval"], "--no-prefect"),
        (["collect"], "--prefect"),
    ],
    ids=["train-no-prefect", "train-prefect", "eval-no-prefect", "collect-prefect"],
)
def test_a_hub_model_out_of_reach_is_one_line_at_once_leaving_nothing(tmp_path, command, prefect):
    port = _closed_port()
    env = _env(tmp_path, HF_ENDPOINT=f"http://127.0.0.1:{port}")  # the hub's host, where nothing answers
    work = tmp_path / "work"
    work.mkdir()
    done = _rlep([*command, prefect, "--model", "rlep-test/not-cached", "--out", "OUT"], env, work)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [done.stderr.strip()]  # one line, no traceback
    for words in (
        f"rlep {command[0]}: error: model 'rlep-test/not-cached' is not in the local Hugging Face cache",
        f"no connection to 127.0.0.1:{port}",  # the probe said so (no retries against the hub)
        "--model PATH",
        "`rlep real-model`",
        "HF_HUB_OFFLINE",
    ):
        assert words in done.stderr
    assert not any(work.iterdir())  # no run directory, no log
    assert not (tmp_path / "rlep-cache").exists()  # and no tiny model built for the evaluation's sake


def test_offline_mode_names_itself(monkeypatch, capsys):
    from huggingface_hub import constants

    from rlep.flows.cli import main

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # HF_HUB_OFFLINE=1, as the hub client read it
    assert main(["eval", "--no-prefect", "--model", "rlep-test/not-cached"]) == 2
    assert "the hub cannot be reached (HF_HUB_OFFLINE is set)" in capsys.readouterr().err


def test_a_cached_hub_model_is_read_from_the_cache_while_the_hub_is_out_of_reach(tmp_path, monkeypatch):
    from huggingface_hub import constants

    from rlep.tasks import models

    snapshot = tmp_path / "hub" / "models--rlep-test--cached" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("abc123")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr("rlep.data.source_rows.hub_unreachable", lambda: "no connection to the hub")
    assert models.resolve_model("rlep-test/cached") == str(snapshot)
    monkeypatch.setattr("rlep.data.source_rows.hub_unreachable", lambda: None)
    assert models.resolve_model("rlep-test/cached") == "rlep-test/cached"  # reachable: the name, as before


def _interrupt_the_build(args, tmp_path):
    """Run `rlep ARGS` with an empty tiny-model cache, send SIGINT once the build has written its first file, and
    return the finished process and its cache folder."""
    work = tmp_path / "work"
    work.mkdir()
    models = tmp_path / "rlep-cache" / "models"
    process = subprocess.Popen(
        [sys.executable, "-m", "rlep.flows.cli", *args],
        env=_env(tmp_path),
        cwd=work,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # SIGINT as a terminal's Ctrl-C sends it, though a shell may have started the tests with it ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 90
        while not any(path.is_dir() and any(path.iterdir()) for path in models.glob(".*.tmp-*")):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the build did not start"
            time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode, err, models, work


@pytest.mark.parametrize(
    "args",
    [
        ["tiny-model", "--quiet"],
        ["collect", "--no-prefect", "--out", "OUT"],
        ["collect", "--prefect", "--out", "OUT"],
    ],
    ids=["tiny-model", "collect-no-prefect", "collect-prefect"],
)
def test_ctrl_c_during_the_tiny_models_build_is_one_line_and_leaves_no_folder(tmp_path, args):
    code, err, models, work = _interrupt_the_build(args, tmp_path)
    assert (code, err) == (130, f"rlep {args[0]}: interrupted\n")
    assert not any(models.iterdir())  # the unfinished build's folder removed, no model that looks complete
    assert not any(work.iterdir())  # nor a run directory


def test_ctrl_c_inside_an_exec_while_the_parser_is_built_is_one_line_and_exit_code_130(tmp_path):
    """Ctrl-C landing in code run by `exec` of a string (dataclasses make their methods so, in the imports that
    building the parser makes), the command run as a module (`python -m`, as the tests run it): one line and exit
    code 130. Python 3.11 then ended the process by SIGINT (status -2) after the line, though the interrupt was
    caught (the CLI test of a Ctrl-C during the tiny model's build failed so in about one run of fifteen to
    twenty); and a Ctrl-C while the parser was built was a traceback."""
    (tmp_path / "interrupted_cli.py").write_text(
        "import sys\n"
        "from rlep.flows import cli\n"
        "def interrupted():\n"
        "    exec('raise KeyboardInterrupt')\n"
        "cli.build_parser = interrupted\n"
        "sys.exit(cli.main(['tiny-model', '--quiet']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "interrupted_cli"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stderr) == (130, "rlep tiny-model: interrupted\n")


@pytest.mark.parametrize(
    ("command", "source_flag", "prefect"),
    [
        (["collect"], "--source", "--no-prefect"),
        (["collect"], "--source", "--prefect"),
        (["train", "--steps", "1"], "--problems-source", "--prefect"),
    ],
    ids=["collect-no-prefect", "collect-prefect", "train-prefect"],
)
def test_a_bad_source_fails_before_the_tiny_model_is_built(tmp_path, command, source_flag, prefect):
    (tmp_path / "p.jsonl").write_text('{"problem": "1+1", "answer": "2"}\n{"problem": "2+2", "answer": ""}\n')
    started = time.monotonic()
    done = _rlep([*command, prefect, source_flag, str(tmp_path / "p.jsonl"), "--out", "OUT"], _env(tmp_path), tmp_path)
    assert done.returncode == 2, done.stderr
    setting = "problems: " if command[0] == "train" else ""  # training has two sources: the error names which
    assert done.stderr.strip() == (
        f"rlep {command[0]}: error: {setting}{tmp_path / 'p.jsonl'}: row 2: empty answer in column 'answer'; set "
        "invalid_rows to skip (--invalid-rows skip) to leave such rows out"
    )
    assert not (tmp_path / "rlep-cache").exists() and not (tmp_path / "OUT").exists()  # nothing built or made
    assert time.monotonic() - started < 60  # seconds (imports on shared cores), where the build takes minutes


def test_a_pipeline_setting_its_file_gives_in_vain_is_said_once_before_the_run_is_refused(tmp_path):
    # `train.out` is each arm's directory under `out`: the file's own is not used, and the command says so once (the
    # settings are built twice, the first time only to know where the run's log goes)
    (tmp_path / "p.yaml").write_text("out: runs/p\ntrain: {out: runs/mine, problems: {source: missing.parquet}}\n")
    done = _rlep(["pipeline", "--config", "p.yaml", "--no-prefect"], _env(tmp_path), tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "warning: p.yaml: train.out 'runs/mine' is not used: the command sets it for each run",
        "rlep pipeline: error: train.problems (run baseline/seed-0): missing.parquet: no such file",
    ]
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("loading", ["rlep.flows.commands", "rlep.data.sources"], ids=["script", "parser"])
@pytest.mark.parametrize("converted", [False, True], ids=["interrupt", "converted"])
def test_ctrl_c_while_the_command_line_loads_is_one_line_and_exit_code_130(tmp_path, loading, converted):
    """The installed `rlep` script imports the command line inside its Ctrl-C handling: a Ctrl-C while the
    commands' modules load (rlep.flows.commands as the script imports the command line, rlep.data.sources as the
    parser is built) is one line and exit code 130, not the import's traceback. Also where a library turned the
    KeyboardInterrupt into an error of its own (pydantic-core makes a SchemaError of one that lands while it
    builds a model class): a Ctrl-C was seen, so it is the interrupt. The Ctrl-C is a real SIGINT, sent by an
    import hook when the module is imported; the script is the one the install wrote (its entry point)."""
    (tmp_path / "interrupted_import.py").write_text(
        "import importlib.abc, os, signal, sys, time\n"
        "from importlib.metadata import entry_points\n"
        "class Interrupt(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        f"        if name == {loading!r}:\n"
        "            try:\n"
        "                os.kill(os.getpid(), signal.SIGINT)\n"
        "                time.sleep(10)\n"
        "            except KeyboardInterrupt:\n"
        f"                if {converted!r}:\n"
        "                    raise RuntimeError('a library made this of the interrupt') from None\n"
        "                raise\n"
        "sys.meta_path.insert(0, Interrupt())\n"
        "main = entry_points(group='console_scripts')['rlep'].load()\n"
        "sys.argv = ['rlep', '--verbose', 'collect', '--no-prefect']\n"
        "sys.exit(main())\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "interrupted_import"],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as a terminal has it (not ignored)
    )
    assert (done.returncode, done.stderr) == (130, "rlep collect: interrupted\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train", "--no-prefect", "--out", "{file}"], "output directory '{file}' cannot be made: it is a file"),
        (
            ["train", "--out", "{file}/run"],
            "output directory '{file}/run' cannot be made: '{file}', on its path, is a file",
        ),
        (["eval", "--no-prefect", "--out", "{file}/run"], "output directory '{file}/run' cannot be made"),
        (
            ["train", "--no-prefect", "--resume", "{dir}", "--config", "{dir}/missing.yaml"],
            "--resume {dir} continues with the run's saved settings; --config {dir}/missing.yaml is not read with it",
        ),
        (["problems", "--out", "{file}/p.jsonl"], "--out {file}/p.jsonl: cannot be written"),
        (["ui", "--recollect-cron", "not a cron"], "--recollect-cron 'not a cron': Invalid cron string"),
        (["serve", "--recollect-cron", "61 * * * *"], "--recollect-cron '61 * * * *': Invalid cron string"),
    ],
    ids=[
        "train-out-file",
        "train-out-under-a-file",
        "eval-out-under-a-file",
        "resume-with-config",
        "problems-out-under-a-file",
        "ui-cron",
        "serve-cron",
    ],
)
def test_a_bad_output_or_schedule_is_one_line_before_any_work(tmp_path, capsys, monkeypatch, args, message):
    from rlep.flows.cli import main

    monkeypatch.chdir(tmp_path)  # a server or a run started by mistake would leave its folder here
    file = tmp_path / "notes.txt"
    file.write_text("not a directory")
    filled = [a.format(file=file, dir=tmp_path) for a in args]
    assert main(filled) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"rlep {args[0]}: error: {message.format(file=file, dir=tmp_path)}") and "\n" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]  # nothing made beside it


def test_ui_starts_its_server_then_serves_the_deployments_its_flags_name_and_stops_the_server(tmp_path, monkeypatch):
    from rlep.flows import deployments, server
    from rlep.flows.cli import main

    calls = []
    monkeypatch.setattr(server, "start_server", lambda host, port, home, log: calls.append(("start", port)) or "proc")
    monkeypatch.setattr(server, "wait_healthy", lambda host, port, process: calls.append(("healthy", process)))
    monkeypatch.setattr(server, "stop", lambda process: calls.append(("stop", process)))
    monkeypatch.setattr(deployments, "serve_deployments", lambda config: calls.append(("serve", config.cron)))
    monkeypatch.setattr(os, "environ", dict(os.environ))  # the server's address is set for the deployments
    home = tmp_path / "home"
    assert main(["ui", "--port", "4321", "--home", str(home), "--recollect-cron", "0 3 * * *"]) == 0
    assert calls == [("start", 4321), ("healthy", "proc"), ("serve", "0 3 * * *"), ("stop", "proc")]
    assert os.environ["PREFECT_API_URL"] == "http://127.0.0.1:4321/api"


@pytest.mark.parametrize("prefect", [False, True], ids=["no-prefect", "prefect"])
def test_a_fresh_train_into_a_run_is_refused_and_resume_cannot_move_a_run(fixture_model, tmp_path, capsys, prefect):
    # A fresh run into a run's directory removed its checkpoints and metrics without a word; `--resume RUN --out NEW`
    # trained RUN on, ignoring --out.
    from rlep.flows.cli import main
    from rlep.tasks.settings.train import TrainConfig
    from rlep.tasks.training.backends.checkpoint import CheckpointError
    from rlep.tasks.training.trainer import train

    run = tmp_path / "run"
    (run / "checkpoints" / "step-2").mkdir(parents=True)
    (run / "checkpoints" / "step-2" / "trainer_state.pt").write_bytes(b"kept")
    (run / "metrics.parquet").write_bytes(b"kept")
    flags = ["--model", str(fixture_model), "--steps", "1", *([] if prefect else ["--no-prefect"])]
    assert main(["train", *flags, "--out", str(run)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"rlep train: error: {run} holds a training run (its last checkpoint: step-2), which a fresh run would "
        f"replace: continue it with `rlep train --resume {run}`, or train into another --out (or remove {run} "
        "first)\n"
    )
    assert main(["train", *flags, "--resume", str(run), "--out", str(tmp_path / "new")]) == 2
    assert f"--resume {run} continues that run in its own directory; --out {tmp_path / 'new'} cannot move it" in (
        capsys.readouterr().err
    )
    with pytest.raises(CheckpointError, match="holds a training run"):  # a run started from the UI or the API
        train(TrainConfig(model=str(fixture_model), out=run, steps=1))
    assert (run / "checkpoints" / "step-2" / "trainer_state.pt").read_bytes() == b"kept"
    assert (run / "metrics.parquet").read_bytes() == b"kept" and not (tmp_path / "new").exists()
