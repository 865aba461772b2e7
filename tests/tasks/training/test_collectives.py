"""The training group's collectives on one in-process gloo rank: their tensors are made on the group's device
(the rank's GPU under NCCL, which refuses CPU tensors), and a failing update is reported as what it is: out
of memory with the rank and the micro-batch size to lower, a lost rank as a lost rank, a bug as itself."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from rlep.tasks.bench.update import model_config, synthetic_batch
from rlep.tasks.settings.backend import backend_config
from rlep.tasks.settings.train import LossConfig, OptimizerConfig
from rlep.tasks.training.backends.policy import PolicySpec
from rlep.tasks.training.maths.update import UpdateSettings

TINY = model_config("tiny")


def test_on_a_gpu_the_training_group_is_nccl_on_the_ranks_gpu(monkeypatch):
    """No GPU here: CUDA and the process group are stubbed; the group's device must be the rank's GPU."""
    from rlep.tasks.training.backends import collectives, distributed

    joined = {}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: joined.setdefault("gpu", index))
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kw: joined.setdefault("backend", backend))
    monkeypatch.setattr(dist, "new_group", lambda **kw: "commands")
    monkeypatch.setattr(dist, "get_rank", lambda *a: 3)
    group = collectives.TrainingGroup()  # this process's real group state is left alone
    monkeypatch.setattr(collectives, "GROUP", group)
    monkeypatch.setattr(distributed, "_GROUP", group)
    for name, value in dict(RANK="3", WORLD_SIZE="4", LOCAL_RANK="3", MASTER_ADDR="x", MASTER_PORT="1").items():
        monkeypatch.setenv(name, value)
    assert distributed.init_distributed(backend_config(nproc=4)) == 3
    assert joined == {"gpu": 3, "backend": "nccl"}
    assert group.device == torch.device("cuda", 3)


ONE_RANK_CASES = Path(__file__).with_name("one_rank_cases.py")


def test_the_cases_on_a_real_gloo_group_pass_in_an_interpreter_of_their_own():
    """one_rank_cases.py: the metric sums reach an NCCL-like all-reduce on the group's device and sum on gloo; an
    out of memory names the rank and the micro-batch size; a bug is itself; a lost rank is one clear error."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", str(ONE_RANK_CASES), "-q", "-p", "no:cacheprovider"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "9 passed" in done.stdout, done.stdout[-2000:]


def test_one_process_names_the_micro_batch_size_when_out_of_memory(monkeypatch):
    from rlep.tasks.training.backends import backend as backend_module

    def policy_update(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")

    local = backend_module.make_backend(PolicySpec(TINY, OptimizerConfig(), backend_config(precision="fp32")))
    monkeypatch.setattr(backend_module, "policy_update", policy_update)
    with pytest.raises(MemoryError, match=r"rank 0 of 1 ran out of memory .* micro_batch_size 4: lower it"):
        local.update(
            synthetic_batch(2, 2, 4, 5, TINY.vocab_size, seed=0), UpdateSettings(LossConfig(), 1.0, micro_batch_size=4)
        )
