"""Launching the torch.distributed backend: the launch module, `rlep train --nproc 2` end to end as Ray actors
then resumed under torchrun (at the same and at another world size), the ranks' environments and the settings
they refuse."""

import os
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from rlep.tasks.settings.train import TrainConfig


def test_several_processes_generate_colocated_in_sync_mode_or_in_a_process_of_its_own_in_async():
    from rlep.tasks.settings.train import TrainConfig

    colocated = TrainConfig(backend={"nproc": 2})  # sync: an engine per rank (tasks/training/generation/colocated.py)
    assert colocated.mode == "sync" and colocated.colocated and colocated.per_prompt_seeds
    with pytest.raises(ValueError, match="ranks use GPUs 0..1"):
        TrainConfig(backend={"nproc": 2}, mode="async", generator_gpus=[1])
    TrainConfig(backend={"nproc": 2}, mode="async", max_staleness=0)


def test_each_rank_starts_at_tasks_training_launch():
    """The launch (torchrun command, Ray actors' entry point, each rank's main) lives in
    tasks/training/backends/launch.py; tasks/training/backends/distributed.py keeps the backend and stays under 400
    lines."""
    import subprocess
    import sys

    import rlep.tasks.training.backends.distributed as distributed
    from rlep.tasks.training.backends import launch

    assert not hasattr(distributed, "main") and not hasattr(distributed, "train_distributed")
    assert callable(launch.main) and callable(launch.train_distributed)
    assert len(Path(distributed.__file__).read_text().splitlines()) < 400
    done = subprocess.run(
        [sys.executable, "-m", "rlep.tasks.training.backends.launch", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "python -m rlep.tasks.training.backends.launch" in done.stdout and "--config" in done.stdout


def _small_distributed_run(model: str) -> list[str]:
    return [
        "train",
        "--no-prefect",
        "--model",
        model,
        "--strategy",
        "ddp",
        "--mode",
        "async",
        "--max-staleness",
        "0",
        "--prompts-per-step",
        "2",
        "--mini-batch-prompts",
        "1",
        "--samples-per-prompt",
        "4",
        "--max-tokens",
        "8",
        "--eval-every",
        "0",
        "--eval-problems-limit",
        "4",
        "--save-every",
        "1",
        "--overlong-buffer",
        "6",
        "--lr",
        "1e-3",
    ]


def _rlep(*args: str) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "rlep.flows.cli", *args],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.mark.slow
def test_ranks_as_ray_actors_then_resumed_under_torchrun_at_the_same_and_another_world_size(fixture_model, tmp_path):
    """`rlep train --nproc 2` end to end: with `--launcher ray`, 2 ranks as actors of a local Ray form the process
    group and train (rank 0's generator process, DDP update, checkpoints a plain HF model loads); the run then
    resumes under torchrun at the same world size, and again on 3 ranks (DCP reshards the checkpoint's shards), its
    weights going on from the checkpoint's each time. One chain rather than a torchrun run and a Ray run each from
    scratch (a fresh torchrun start is test_async_fsdp2_survives_a_generator_slower_than_the_collective_timeout's)."""
    import json

    import pyarrow.parquet as pq
    from safetensors.torch import load_file

    out = tmp_path / "run"
    _rlep(
        *_small_distributed_run(fixture_model), "--nproc", "2", "--launcher", "ray", "--steps", "2", "--out", str(out)
    )
    saved = json.loads((out / "train_config.json").read_text())
    assert saved["backend"]["launcher"] == "ray" and saved["backend"]["nproc"] == 2

    def world_size(step: int) -> int:
        return torch.load(out / "checkpoints" / f"step-{step}" / "trainer_state.pt", weights_only=False)["world_size"]

    assert world_size(2) == 2
    _rlep("train", "--no-prefect", "--resume", str(out), "--steps", "3", "--launcher", "torchrun")
    metrics = pq.read_table(out / "metrics.parquet").to_pylist()
    assert [row["step"] for row in metrics] == [1, 2, 3] and all(row["optimizer_updates"] == 2 for row in metrics)
    AutoModelForCausalLM.from_pretrained(out / "checkpoints" / "step-3")

    before = load_file(out / "checkpoints" / "step-3" / "model.safetensors")
    _rlep("train", "--no-prefect", "--resume", str(out), "--steps", "4", "--nproc", "3", "--launcher", "torchrun")
    metrics = pq.read_table(out / "metrics.parquet").to_pylist()
    assert [row["step"] for row in metrics] == [1, 2, 3, 4] and all(row["optimizer_updates"] == 2 for row in metrics)
    assert [world_size(s) for s in (3, 4)] == [2, 3]  # each checkpoint records the world size it was saved at
    after = load_file(out / "checkpoints" / "step-4" / "model.safetensors")
    assert before.keys() == after.keys() and any(not torch.equal(before[k], after[k]) for k in before)
    assert max((before[k] - after[k]).abs().max().item() for k in before) < 0.05  # one small step on, not a restart
    AutoModelForCausalLM.from_pretrained(out / "checkpoints" / "step-4")


def test_rank_environments_number_ranks_per_node():
    from rlep.tasks.training.backends.ray_launch import rank_environments

    envs = rank_environments([("a", "10.0.0.1"), ("a", "10.0.0.1"), ("b", "10.0.0.2")], 29500, one_gpu_each=False)
    assert [(e["RANK"], e["LOCAL_RANK"], e["LOCAL_WORLD_SIZE"]) for e in envs] == [
        ("0", "0", "2"),
        ("1", "1", "2"),
        ("2", "0", "1"),
    ]
    assert {e["MASTER_ADDR"] for e in envs} == {"10.0.0.1"} and {e["WORLD_SIZE"] for e in envs} == {"3"}
    on_gpus = rank_environments([("a", "h"), ("a", "h")], 1, one_gpu_each=True)
    assert [e["LOCAL_RANK"] for e in on_gpus] == ["0", "0"]  # Ray shows each actor only its own GPU


def test_launcher_ray_refuses_generator_gpus():
    with pytest.raises(ValueError, match="not supported with backend.launcher ray"):
        TrainConfig(backend={"nproc": 2, "launcher": "ray"}, mode="async", generator_gpus=[2])


@pytest.mark.slow
def test_async_fsdp2_survives_a_generator_slower_than_the_collective_timeout(tmp_path, monkeypatch):
    """FSDP2 gathers each tensor of a weight sync with a collective: the sync must not begin while the generator is
    still answering an earlier request, or rank 1 waits inside a gather past collective_timeout (3 s here) for a
    generation (8 s) and the run stops, blamed on a training process. Weights of several 1 MiB buckets; one step
    of staleness, so step 2's request is in progress when step 1's weights are ready."""
    import pyarrow.parquet as pq

    from rlep.data.tiny_model import TinyModelConfig, build_tiny_model
    from rlep.tasks.training.generation.generator_worker import DELAY_ENV

    wide = TinyModelConfig.fixture().model_copy(update={"num_layers": 2, "intermediate_size": 2048})
    model = build_tiny_model(config=wide, progress=False)
    assert (model / "model.safetensors").stat().st_size > 3 << 20  # float32: more than three buckets of 1 MiB
    monkeypatch.setenv(DELAY_ENV, "8")  # the generator sleeps before each request
    out = tmp_path / "run"
    _rlep(
        *("train", "--no-prefect", "--model", str(model), "--engine", "transformers", "--out", str(out)),
        *("--nproc", "2", "--strategy", "fsdp2", "--mode", "async", "--max-staleness", "1"),
        *("--collective-timeout", "3", "--sync-bucket-mb", "1", "--steps", "3", "--save-every", "0"),
        *("--prompts-per-step", "2", "--mini-batch-prompts", "1", "--samples-per-prompt", "4", "--max-tokens", "8"),
        *("--eval-every", "0", "--eval-problems-limit", "2", "--overlong-buffer", "6"),
    )
    metrics = pq.read_table(out / "metrics.parquet").to_pandas()
    assert metrics.step.tolist() == [1, 2, 3]
    assert metrics.staleness_max.tolist() == [0, 1, 1]  # the bound (1) kept, and reached
    assert metrics.time_sync.max() > 3  # a sync waited on the generator longer than a collective may wait
