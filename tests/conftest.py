"""Shared fixtures: offline settings, a fast fixture model (built once, cached), one vLLM engine per session."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

# Nothing in the tests may reach the network, and vLLM must keep its engine in this process.
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"


def _cores() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto` (pyproject's addopts): one worker process per core, at most 4 (each may hold a vLLM engine and
    train a model at once)."""
    return max(1, min(len(_cores()), 4))


# Under xdist each worker's torch and vLLM get its share of the cores as threads (one each on 2 cores), set before
# either is imported and inherited by the processes a test starts: two workers' OpenMP threads spinning on the same
# cores run many times slower than one thread each (FIELD_NOTES). Not pinned to cores: a test whose processes work
# side by side (two ranks, trainer and generator, two Ray runs) still gets both cores when the other worker idles.
if "PYTEST_XDIST_WORKER" in os.environ:
    _workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    os.environ["OMP_NUM_THREADS"] = str(max(1, len(_cores()) // _workers))
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")


def pytest_collection_modifyitems(session, config, items) -> None:
    """Files with the most end-to-end (`slow`) tests first. Under `make test` xdist deals the files in its own
    order (most tests first, its `--loadscope-reorder` default), which this sort does not change; it holds for
    `-n 0` and `--no-loadscope-reorder`. (Keeping this order under xdist, estimated at 30 s a slow test, measured
    20 min 31 s of pytest against 16 min 15 s with xdist's, 2026-11-28.)"""
    from collections import Counter

    slow = Counter(item.path for item in items if item.get_closest_marker("slow"))
    items.sort(key=lambda item: -slow[item.path])  # most end-to-end tests first; stable: a file's own order kept


@pytest.fixture(scope="session")
def fixture_model() -> str:
    """Path of the fixture-size tiny model (mechanics only; accuracy is irrelevant)."""
    from rlep.data.tiny_model import TinyModelConfig, build_tiny_model

    return str(build_tiny_model(config=TinyModelConfig.fixture(), progress=False))


# A chat template in the tiny tokenizer's alphabet (printable ASCII), shaped like ChatML.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


@pytest.fixture(scope="session")
def chat_model(fixture_model, tmp_path_factory) -> str:
    """The fixture model with CHAT_TEMPLATE in its tokenizer: a stand-in for an instruct model."""
    import shutil

    from transformers import AutoTokenizer

    out = tmp_path_factory.mktemp("chat") / "model"
    shutil.copytree(fixture_model, out)
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(str(out))
    return str(out)


@pytest.fixture(scope="session")
def vllm_engine(fixture_model):
    """One in-process vLLM engine for the whole session (start-up costs seconds). Tests that change its
    weights must restore them (see `restore_weights`)."""
    from rlep.tasks.engines import make_engine
    from rlep.tasks.settings.engine import EngineConfig

    engine = make_engine(fixture_model, EngineConfig(backend="vllm", max_num_seqs=64))
    yield engine
    engine.close()


def assert_samples_from(model, completions, model_dir, temperature: float = 1.0) -> None:
    """An engine's behaviour log-probs of `completions` (per prompt, as `generate` returns them) are `model`'s own
    at `temperature` (max gap < 1e-3 over every token): the engine holds the trainer's weights. `model_dir` gives the
    tokenizer's pad id."""
    from transformers import AutoTokenizer

    from rlep.tasks.training.maths.logprobs import completion_logprobs

    flat = [c for group in completions for c in group]
    pad = AutoTokenizer.from_pretrained(model_dir).pad_token_id
    recomputed = completion_logprobs(
        model, [c.prompt_token_ids for c in flat], [c.token_ids for c in flat], pad, temperature=temperature
    )
    gaps = [abs(a - b) for c, r in zip(flat, recomputed) for a, b in zip(c.logprobs, r)]
    assert len(gaps) == sum(len(c.token_ids) for c in flat) > 0 and max(gaps) < 1e-3


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a process group's rendezvous)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tiny_study_settings(model, out, arms, **extra) -> dict:
    """A two-seed study of two-step runs on the fixture model with the transformers engine: settings as a study
    YAML holds them, `extra` replacing any top-level entry (seeds, runner, claims, ...)."""
    problems = {"source": "tiny-math", "split": "train", "limit": 6}
    held_out = {"source": "tiny-math", "split": "test", "limit": 4}
    return {
        "out": str(out),
        "seeds": [0, 1],
        "collect": {
            "model": model,
            "problems": problems,
            "samples_per_prompt": 2,
            "sampling": {"max_tokens": 10},
            "min_correct": 1,
            "shard_size": 6,
            "engine": {"backend": "transformers"},
        },
        "train": {
            "model": model,
            "problems": problems,
            "eval_problems": held_out,
            "steps": 2,
            "eval_every": 1,
            "prompts_per_step": 3,
            "samples_per_prompt": 4,
            "sampling": {"max_tokens": 10},
            "engine": {"backend": "transformers"},
        },
        "evaluate": {"samples": 2},
        "arms": arms,
        **extra,
    }


def judged_row(problem, response: str, correct: bool = True, *, prompt: str | None = None, **fields) -> dict:
    """A trajectory row of `response` to `problem`, judged `correct` (right: the gold answer extracted, reward
    1; wrong: not equal, reward 0), prompted the way collection renders it; `fields` set any other column of
    `trajectory_row` (token ids, run id, model, sample index, ...), whose defaults are those of an imported
    pool: no token ids, run and model `gold`. Tests that build pools and stores import it from here."""
    from rlep.data.problem import render_prompt
    from rlep.data.trajectory import trajectory_row

    values = dict(
        response_token_ids=[],
        behaviour_logprobs=[],
        finish_reason="stop",
        correct=correct,
        extracted_answer=problem.answer if correct else None,
        verdict_reason="equal" if correct else "not-equal",
        reward=float(correct),
        run_id="gold",
        policy_version=0,
        model="gold",
        sampling={},
        sample_index=0,
    )
    return trajectory_row(
        problem, render_prompt(problem) if prompt is None else prompt, response=response, **{**values, **fields}
    )


def update_rollout(i: int, prompt: list[int], response: list[int], generator):
    """Rollout `i` of a synthetic update batch: `prompt` and `response` token ids, random behaviour log-probs and
    advantage from `generator`; every third one replayed (the update tests' batches)."""
    import torch

    from rlep.data.rollout import Rollout

    rollout = Rollout(
        problem_id=str(i),
        data_source="t",
        prompt="p",
        gold_answer="1",
        response="r",
        response_token_ids=response,
        policy_version=0,
        prompt_token_ids=prompt,
        behaviour_logprobs=(-torch.rand(len(response), generator=generator)).tolist(),
        finish_reason="stop",
        sample_index=i,
    )
    rollout.origin = "replay" if i % 3 == 0 else "fresh"
    rollout.advantage = float(torch.randn((), generator=generator))
    return rollout


def write_rows(path, rows):
    """`rows` (trajectory rows) written as one Parquet file at `path`, which is returned."""
    from rlep.data.fs import write_parquet_atomic
    from rlep.data.trajectory import to_table

    write_parquet_atomic(path, to_table(rows))
    return path


def boxed_gold(gold: str, prompt: str) -> list[str]:
    """The default right answers: the gold answer, boxed, once."""
    return [f"\\boxed{{{gold}}}"]


def answer_with_gold(monkeypatch, answers=boxed_gold) -> list[str]:
    """Make collection's engine right on purpose: for every prompt, the first completions become
    `answers(gold, prompt)` (without token ids, so the trainer tokenises them, as it does for imported pools);
    the other completions are the model's own. Everything else (verification, the pool rule, training on
    the pool) is the real code. Returns the list of models the engine was started for."""
    import rlep.tasks.collect as collect_module
    from rlep.data.problem import render_prompt
    from rlep.data.tiny_math import FAMILIES, LEVELS, generate
    from rlep.tasks.engines.base import Completion

    # The tiny-math problems a test can ask for (a source's first problems, over all cells or one), by prompt.
    cells = [{}] + [{"families": [f], "levels": [lv]} for f in FAMILIES for lv in LEVELS]
    gold = {
        render_prompt(p): p.answer
        for split in ("train", "test")
        for cell in cells
        for p in generate(split, 300, **cell)
    }
    real = collect_module.shared_engine
    models = []

    class GoldAnswers:
        def __init__(self, engine):
            self.engine = engine

        def generate(self, prompts, sampling, progress=False):
            out = self.engine.generate(prompts, sampling, progress)
            for prompt, completions in zip(prompts, out):
                for i, text in enumerate(answers(gold[prompt], prompt)):
                    completions[i] = Completion(text, [], [], "stop", completions[i].prompt_token_ids)
            return out

    def shared_engine(model, config):
        models.append(str(model))
        return GoldAnswers(real(model, config))

    monkeypatch.setattr(collect_module, "shared_engine", shared_engine)
    return models


@pytest.fixture
def half_right_collection(monkeypatch):
    """The fixture model gets nothing right, so its pool would be empty: during collection, the first answer to
    each prompt is the boxed gold answer (see `answer_with_gold`)."""
    return answer_with_gold(monkeypatch)


@pytest.fixture(scope="session")
def gold_answers():
    """`answer_with_gold` for fixtures of a wider scope, which patch with their own `pytest.MonkeyPatch`."""
    return answer_with_gold


def _assert_same_run(straight, resumed, steps: int, columns: tuple[str, ...]) -> None:
    """A resumed run reproduces the uninterrupted one: the same steps, the same values of `columns` in
    metrics.parquet at every step, and the same final weights."""
    import pyarrow.parquet as pq
    import torch
    from safetensors.torch import load_file

    from rlep.data.run_layout import TrainRunLayout

    a, b = TrainRunLayout(straight), TrainRunLayout(resumed)
    first, again = pq.read_table(a.metrics).to_pandas(), pq.read_table(b.metrics).to_pandas()
    assert again.step.tolist() == list(range(1, steps + 1))
    for column in columns:
        assert again[column].tolist() == pytest.approx(first[column].tolist(), rel=1e-4, abs=1e-6), column
    wa, wb = (load_file(layout.checkpoint(steps) / "model.safetensors") for layout in (a, b))
    assert all(torch.allclose(wa[k], wb[k], atol=1e-5) for k in wa)


@pytest.fixture(scope="session")
def assert_same_run():
    """`assert_same_run(straight_dir, resumed_dir, steps, columns)`: see `_assert_same_run`."""
    return _assert_same_run


@pytest.fixture(scope="session")
def prefect_server():
    """One temporary Prefect server and database for the session (it takes ~10 s to start), for the tests that
    need a server; yields its API URL. Its runs accumulate over the session: filter by flow run id, or read a
    test's own with `prefect_runs`."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield PREFECT_API_URL.value()


def flow_run_logs(flow_run_id, wait: float = 10.0) -> list:
    """The log records of a flow run and its task runs, as the UI's Logs tab reads them, once its `step 2/2` line
    has arrived (or after `wait` seconds)."""
    import time

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    deadline = time.monotonic() + wait
    with get_client(sync_client=True) as client:
        while True:  # records reach the server in batches, a moment after they are logged
            logs = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
            if any("step 2/2" in log.message for log in logs) or time.monotonic() > deadline:
                return logs
            time.sleep(0.5)


@pytest.fixture
def prefect_runs(prefect_server):
    """`prefect_runs(client)`: (flow runs, artifacts) this test made on the session's server, i.e. the runs created
    since it began, started or not (an xdist worker runs one test at a time, each worker with a server of its own)."""
    from datetime import datetime, timezone

    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        FlowRunFilter,
        FlowRunFilterExpectedStartTime,
    )

    began = datetime.now(timezone.utc)

    def read(client):
        created = FlowRunFilterExpectedStartTime(after_=began)  # an ad-hoc run's is set when it is created
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(expected_start_time=created))
        ids = ArtifactFilterFlowRunId(any_=[r.id for r in runs])
        return runs, client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ids)) if runs else []

    return read


# `rlep train` flags of the tests' small runs: PROBLEMS' cells (6 training, 6 held-out problems), 5 steps of 3 prompts
# x 4
# answers, a checkpoint every step.
SMALL_RUN = (
    "--steps 5 --prompts-per-step 3 --samples-per-prompt 4 --max-tokens 12 --problems-limit 6 --eval-problems-limit 6 "
    "--problems-families add sub mul frac decimal --problems-levels 1 2 3 --eval-every 2 --save-every 1 "
    "--overlong-buffer 8 --lr 1e-3"
)


@pytest.fixture
def small_run_flags(fixture_model) -> list[str]:
    """The flags of a small `rlep train` run from the fixture model (tests add the mode, engine and replay)."""
    return ["--model", fixture_model, *SMALL_RUN.split()]


def _interruptible() -> None:
    # A run started from a background job inherits SIGINT ignored (POSIX: asynchronous commands of a shell without
    # job control), and Python then installs no KeyboardInterrupt handler: give it a terminal's default, so
    # Ctrl-C means the same here wherever the test suite itself was started from.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_train(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "rlep.flows.cli", "train", "--no-prefect", *args],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        start_new_session=True,
        preexec_fn=_interruptible,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.fixture
def train_cli():
    """Start `rlep train --no-prefect ARGS` in its own session, output piped, Ctrl-C as from a terminal."""
    return _start_train


def _train_here(args: list[str]):
    """`rlep train --no-prefect ARGS` carried out in this process, as the command does (its flags parsed by its
    parser into its settings, then the same `train`); returns the run's result. For an uninterrupted reference
    run: the worker has torch and vLLM imported already, so it skips a fresh interpreter's start-up (seconds of
    the suite per run), and the processes a test kills and resumes still start from nothing."""
    from rlep.flows.cli import build_parser, parse_args
    from rlep.flows.commands.common import config_from_args
    from rlep.tasks.settings.train import TrainConfig
    from rlep.tasks.training.trainer import train

    parsed = parse_args(build_parser(), ["train", "--no-prefect", *args])
    return train(config_from_args(TrainConfig, parsed), progress=False)


@pytest.fixture
def train_here():
    """`train_here(ARGS)`: `rlep train --no-prefect ARGS` in this process (see `_train_here`)."""
    return _train_here


def process_running(pid: int) -> bool:
    """Is `pid` a running process (a zombie, exited but not yet reaped, counts as gone)?"""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
