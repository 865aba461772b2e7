"""Async mode: generation in its own process, overlapped with training, within `max_staleness`.

Real short runs on the fixture model (vLLM in the generator process) for every replay strategy; the
staleness bound with either side slowed on purpose (and the same run whichever side is slow, because the
version each request is generated with is fixed by the order of messages, not by timing); truncated
importance weights on stale fresh rollouts; the drop-and-regenerate guard; shutdown after a normal end,
an error on either side and Ctrl-C, with no generator process left; kill-and-resume.
"""

import os
import signal
import time

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import torch
from conftest import judged_row, process_running, write_rows
from safetensors.torch import load_file

from rlep.data.problem import Problem
from rlep.data.sources import load_problems
from rlep.tasks.engines import Completion
from rlep.tasks.settings.engine import EngineConfig, SamplingConfig
from rlep.tasks.settings.source import problem_source
from rlep.tasks.settings.train import TrainConfig
from rlep.tasks.training.backends.checkpoint import latest_checkpoint
from rlep.tasks.training.generation.async_gen import (
    CoreShare,
    GeneratorError,
    GeneratorProcess,
    RolloutFeed,
    generator_gpu_env,
    update_device,
)
from rlep.tasks.training.generation.generator_worker import DELAY_ENV
from rlep.tasks.training.generation.weight_sync import GatheredWeights
from rlep.tasks.training.loop.steps import Trainer

PROBLEMS = {"source": "tiny-math", "split": "train", "limit": 6}


@pytest.fixture(scope="module")
def gold_pool(tmp_path_factory):
    """Verified successes for the training problems (the fixture model gets nothing right): each gold answer, boxed."""
    rows = [judged_row(p, f"\\boxed{{{p.answer}}}") for p in load_problems(problem_source(**PROBLEMS))]
    return write_rows(tmp_path_factory.mktemp("pool") / "pool.parquet", rows)


def _config(model, out, replay=None, **kw):
    settings = dict(
        model=model,
        out=str(out),
        steps=3,
        prompts_per_step=3,
        samples_per_prompt=4,
        sampling={"max_tokens": 12},
        eval_every=0,
        save_every=0,
        problems=PROBLEMS,
        engine={"backend": "vllm", "max_num_seqs": 64},
        eval_problems={"source": "tiny-math", "split": "test", "limit": 6},
        replay=replay or {"kind": "none"},
        loss={"overlong_buffer": 8},
        optimizer={"lr": 1e-3},
        mode="async",
    )
    settings.update(kw)
    return TrainConfig.model_validate(settings)


def _run(config, spy=None):
    trainer = Trainer(config, progress=False)
    pid = trainer.engine.pid
    if spy:
        spy(trainer)
    try:
        trainer.run()
    finally:
        trainer.close()
    assert not process_running(pid), "the generator process outlived the run"
    return pq.read_table(config.out / "metrics.parquet").to_pandas()


@pytest.mark.slow
@pytest.mark.parametrize(
    "replay",
    [
        {"kind": "none"},
        {"kind": "fifo", "batch_size": 16},
        {"kind": "prioritized", "replay_fraction": 0.5, "max_age": 2},
        {"kind": "rlep", "replay_per_group": 2},
    ],
    ids=lambda r: r["kind"],
)
def test_every_strategy_trains_in_async_mode(fixture_model, gold_pool, tmp_path, replay):
    if replay["kind"] == "rlep":
        replay = {**replay, "pool": str(gold_pool)}
    config = _config(fixture_model, tmp_path / "run", replay, eval_every=2, save_every=3)
    metrics = _run(config)
    assert metrics.step.tolist() == [1, 2, 3]
    # Step 1 comes from the starting weights; from step 2 on, from the weights one update older than trained.
    assert metrics.staleness_max.tolist() == [0, 1, 1] and metrics.staleness_mean.tolist() == [0, 1, 1]
    assert (metrics.dropped_stale == 0).all()
    for column in ("time_wait_generate", "time_wait_train", "time_generator_busy", "time_step"):
        assert (metrics[column] >= 0).all() and metrics[column].notna().all(), column
    fresh = pq.read_table(tmp_path / "run" / "fresh")
    sampled = fresh.filter(pc.equal(fresh["origin"], "fresh"))
    assert sorted(set(sampled.column("policy_version").to_pylist())) == [0, 1]  # the true generating version
    assert sampled.num_rows == 3 * 3 * 4 and all(len(lp) for lp in sampled.column("behaviour_logprobs").to_pylist())
    evals = pq.read_table(tmp_path / "run" / "eval.parquet").to_pandas()
    assert sorted(set(evals.step)) == [0, 2, 3]  # held-out evaluation through the generator process
    before, after = (
        load_file(os.path.join(fixture_model, "model.safetensors")),
        load_file(latest_checkpoint(config.out) / "model.safetensors"),
    )
    assert any(not torch.equal(before[k], after[k]) for k in before)
    if replay["kind"] != "none":
        assert metrics.replay_share.iloc[1:].gt(0).all()


def _slow_trainer(seconds):
    def spy(trainer):
        import rlep.tasks.training.backends.backend as module

        update = module.policy_update

        def slow(*args, **kwargs):
            time.sleep(seconds)
            return update(*args, **kwargs)

        module.policy_update = slow  # the test's monkeypatch puts the real one back

    return spy


@pytest.mark.slow
def test_staleness_bound_holds_whichever_side_is_slowed(fixture_model, tmp_path, monkeypatch):
    # max_staleness 1 is checked in every strategy's run above; here 2, with two requests in flight.
    common = dict(steps=4, max_staleness=2, replay={"kind": "fifo", "batch_size": 16})
    monkeypatch.setenv(DELAY_ENV, "0.4")  # the generator sleeps before each request
    slow_generator = _run(_config(fixture_model, tmp_path / "slow-gen", **common))
    monkeypatch.delenv(DELAY_ENV)
    import rlep.tasks.training.backends.backend as module

    monkeypatch.setattr(module, "policy_update", module.policy_update)  # restored after the test
    slow_trainer = _run(_config(fixture_model, tmp_path / "slow-train", **common), spy=_slow_trainer(0.4))
    expected = [0, 1, 2, 2]  # the bound, reached once enough updates exist
    for metrics in (slow_generator, slow_trainer):
        assert metrics.staleness_max.tolist() == expected and (metrics.dropped_stale == 0).all()
    # The same run either way: what each request is generated with depends on message order, not on timing.
    for column in ("reward_mean", "loss", "replay_share", "tokens_generated_total"):
        assert slow_generator[column].tolist() == pytest.approx(slow_trainer[column].tolist(), rel=1e-5, abs=1e-7), (
            column
        )


@pytest.mark.slow
def test_truncated_is_weights_apply_to_stale_fresh_rollouts(fixture_model, tmp_path, monkeypatch):
    import rlep.tasks.training.maths.update as update

    weights, parts = [], []
    loss_fn = update.clipped_policy_loss
    add = update._Accumulator.add
    monkeypatch.setattr(
        update, "clipped_policy_loss", lambda *a, **k: (weights.append(k["token_weights"]), loss_fn(*a, **k))[1]
    )
    monkeypatch.setattr(update._Accumulator, "add", lambda self, part, *a: (parts.append(part), add(self, part, *a))[1])
    config = _config(
        fixture_model,
        tmp_path / "tis",
        steps=3,
        mini_batch_prompts=1,
        loss={"is_correction": "truncate", "is_cap": 2.0, "overlong_buffer": 8},
    )
    metrics = _run(config)
    stale, current = [], []
    for w, part in zip(weights, parts):
        real = part.mask.bool()
        for row in range(len(part)):
            assert not part.is_replay[row]  # no replay: every row is a fresh rollout
            (stale if part.age[row] > 0 else current).append(w[row][real[row]])
    assert stale and current
    assert all((v == 1.0).all() for v in current)  # generated by the weights being trained: no correction
    stale_values = torch.cat(stale)
    assert (stale_values != 1.0).any() and (stale_values <= 2.0).all()
    assert metrics.is_ratio_mean.iloc[0] == 1.0 and (metrics.is_ratio_mean.iloc[1:] != 1.0).all()


class _LaggingEngine:
    """A generator that applies new weights `lag` pushes late: its answers can arrive beyond the bound."""

    def __init__(self, lag):
        self.lag, self.pushed, self.requests = lag, [0], []

    def submit(self, tag, prompts, sampling):
        self.requests.append(tag[1])

    def receive(self, tag):
        version = self.pushed[max(0, len(self.pushed) - 1 - self.lag)]
        self.lag = 0  # a regenerated request sees the newest weights
        return [[Completion("x", [1], [-0.5], "stop", [2])] * 2], version, 0.0, 0.0

    def push_weights(self, state_dict, version):
        self.pushed.append(version)


def test_answers_beyond_the_bound_are_dropped_counted_and_regenerated():
    problem = Problem(id="p", problem="1+1", answer="2", data_source="s")
    engine = _LaggingEngine(lag=0)
    feed = RolloutFeed(
        engine, "async", 1, 10, lambda: [problem], lambda s: SamplingConfig(n=2, seed=s), "{problem}", version=0
    )
    for step in (1, 2, 3):
        arrival = feed.take(step)
        assert arrival.dropped == 0 and (step - 1) - arrival.version <= 1
        feed.publish(step, {})
    engine.lag = 2  # the next answers come from weights 3 updates old: beyond max_staleness 1
    arrival = feed.take(4)
    assert arrival.dropped == 2 and arrival.version == 3  # both answers thrown away; regenerated with the newest
    assert engine.requests.count(4) == 2


@pytest.fixture
def restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_core_share_gives_the_update_every_core_while_the_generator_waits(monkeypatch, restore_threads):
    import rlep.tasks.training.generation.async_gen as module

    monkeypatch.setattr(module.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    torch.set_num_threads(4)
    cores = CoreShare()
    assert cores.generator_cores == [2, 3] and torch.get_num_threads() == 2  # the generator starts busy (loading)
    cores.adjust(generator_busy=False)
    assert torch.get_num_threads() == 4
    cores.adjust(generator_busy=True)
    assert torch.get_num_threads() == 2
    monkeypatch.setattr(module.os, "sched_getaffinity", lambda pid: {0})
    CoreShare().adjust(generator_busy=True)  # one core: nothing to share, nothing pinned
    assert torch.get_num_threads() == 2 and CoreShare().generator_cores == []
    monkeypatch.setattr(module.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    torch.set_num_threads(1)  # a cap set by the user (OMP_NUM_THREADS=1) holds in both states
    capped = CoreShare()
    capped.adjust(generator_busy=False)
    assert torch.get_num_threads() == 1 and capped.generator_cores == [2, 3]


def test_generator_gpus_give_the_engine_and_the_update_separate_devices():
    # Nothing here has a GPU: the mapping the processes would be started with, checked as data.
    assert generator_gpu_env([1], None) == "1"
    assert generator_gpu_env([1, 2], "4,5,6") == "5,6"  # numbered as the trainer sees them, mapped to the real ones
    with pytest.raises(ValueError, match="sees 2 GPUs"):
        generator_gpu_env([2], "0,1")
    assert update_device([], 0) == "cpu" and update_device([], 2) == "cuda"
    assert update_device([0], 2) == "cuda:1" and update_device([1, 2], 4) == "cuda:0"
    with pytest.raises(ValueError, match="takes all 2 GPUs"):
        update_device([0, 1], 2)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"mode": "sync", "generator_gpus": [1]}, "applies to mode async only"),
        ({"mode": "async", "generator_gpus": [1, 1]}, "must be distinct"),
        (
            {"mode": "async", "generator_gpus": [1], "engine": {"tensor_parallel_size": 2}},
            r"tensor_parallel_size \(2\) > the generator's GPUs",
        ),
    ],
)
def test_generator_gpus_are_checked_against_mode_and_tensor_parallelism(settings, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig.model_validate(settings)


def test_the_generator_is_busy_from_a_request_until_its_answers_arrive_and_waits_are_bounded(
    fixture_model, monkeypatch
):
    monkeypatch.setenv(DELAY_ENV, "1.5")  # the generator sleeps before each request
    generator = GeneratorProcess(fixture_model, EngineConfig(backend="transformers"), version=0)
    try:
        assert not generator.busy()
        generator.submit(("step", 1), ["1+1="], SamplingConfig(n=2, max_tokens=4, seed=0))
        assert generator.busy()
        completions, version, busy_seconds, _ = generator.receive(("step", 1))
        assert not generator.busy() and len(completions[0]) == 2 and version == 0 and busy_seconds >= 1.5
        generator.submit(("step", 2), ["2+2="], SamplingConfig(n=2, max_tokens=4, seed=0))
        deadline = time.time() + 60
        while generator.busy():  # answers are noticed without a receive (they wait in `arrived`)
            assert time.time() < deadline
            time.sleep(0.1)
        assert len(generator.receive(("step", 2))[0][0]) == 2
        # A wait longer than engine.generator_timeout stops with what it waited for; weights gathered by collectives
        # wait, outside them, for the requests sent before.
        generator.submit(("step", 3), ["3+3="], SamplingConfig(n=2, max_tokens=4, seed=0))
        generator.timeout = 0.3
        late = r"did not answer step 3's request, which policy version 2's weights wait for, within 0.3s"
        with pytest.raises(GeneratorError, match=late):
            generator.push_weights(GatheredWeights(iter(())), version=2)
        with pytest.raises(GeneratorError, match=r"did not answer step 3's request within 0.3s \(engine.generator_t"):
            generator.receive(("step", 3))
    finally:
        generator.close()
    assert not process_running(generator.pid)


@pytest.mark.slow
def test_an_error_on_either_side_stops_both(fixture_model, tmp_path, monkeypatch):
    import rlep.tasks.training.backends.backend as module

    update = module.policy_update
    calls = []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("injected trainer failure")
        return update(*args, **kwargs)

    monkeypatch.setattr(module, "policy_update", failing)
    trainer = Trainer(_config(fixture_model, tmp_path / "trainer-error", steps=4), progress=False)
    pid = trainer.engine.pid
    with pytest.raises(RuntimeError, match="injected trainer failure"):
        try:
            trainer.run()
        finally:
            trainer.close()
    assert not process_running(pid)
    monkeypatch.setattr(module, "policy_update", update)

    # The generator fails: weights it cannot load (a name the model does not have).
    trainer = Trainer(_config(fixture_model, tmp_path / "generator-error", steps=4), progress=False)
    pid = trainer.engine.pid
    trainer.backend.named_weights = lambda dtype: iter([("no.such.weight", torch.zeros(3))])
    with pytest.raises(GeneratorError, match=f"generator process {pid} failed"):
        try:
            trainer.run()
        finally:
            trainer.close()
    assert not process_running(pid)


def _children(pid):
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(c) for c in f.read().split()]


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode()
    except FileNotFoundError:
        return ""


def _async_flags(small_run_flags):
    return [
        *small_run_flags,
        *"--mode async --engine vllm --replay fifo --batch-size 16 --is-correction truncate".split(),
    ]


def _wait_for_checkpoint(proc, out, names, deadline=300):
    end = time.time() + deadline
    while latest_checkpoint(out) is None or latest_checkpoint(out).name not in names:
        assert proc.poll() is None, proc.stdout.read()
        assert time.time() < end
        time.sleep(0.05)


@pytest.mark.slow
def test_ctrl_c_stops_trainer_and_generator(small_run_flags, train_cli, tmp_path):
    out = tmp_path / "interrupted"
    # Far more steps than it can finish while the test reacts, however slow or loaded the machine: the run is
    # always still going when Ctrl-C arrives (with 5 steps a loaded machine once finished first, exit 0).
    args = _async_flags(small_run_flags)
    args[args.index("--steps") + 1] = "10000"
    proc = train_cli([*args, "--out", str(out)])
    _wait_for_checkpoint(proc, out, tuple(f"step-{n}" for n in range(1, 10000)))
    workers = [c for c in _children(proc.pid) if "generator_worker" in _cmdline(c)]
    assert len(workers) == 1
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
    try:
        proc.communicate(timeout=60)
    finally:  # never leave a 10,000-step run behind
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0
    assert not process_running(workers[0])


@pytest.mark.slow
def test_kill_and_resume_reproduces_the_uninterrupted_async_run(
    small_run_flags, train_cli, train_here, tmp_path, assert_same_run
):
    train_here([*_async_flags(small_run_flags), "--out", str(tmp_path / "straight")])  # the reference, in this process

    out = tmp_path / "killed"
    proc = train_cli([*_async_flags(small_run_flags), "--out", str(out)])
    _wait_for_checkpoint(proc, out, ("step-2", "step-3"))
    workers = [c for c in _children(proc.pid) if "generator_worker" in _cmdline(c)]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    end = time.time() + 30  # the generator notices its trainer is gone and exits by itself
    while any(process_running(w) for w in workers) and time.time() < end:
        time.sleep(0.1)
    assert workers and not any(process_running(w) for w in workers)
    resumed = train_cli(["--resume", str(out)])
    output, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, output

    assert_same_run(
        tmp_path / "straight",
        out,
        5,
        (
            "reward_mean",
            "accuracy",
            "replay_share",
            "tokens_generated_total",
            "loss",
            "staleness_mean",
            "is_ratio_mean",
        ),
    )
    # Each step's fresh answers were written once: none lost, none trained twice.
    fresh = pq.read_table(out / "fresh").to_pandas()
    fresh = fresh[fresh.origin == "fresh"]
    assert (
        len(fresh) == 5 * 3 * 4
        and not fresh.duplicated(["policy_version", "problem_id", "sample_index", "sampling"]).any()
    )
