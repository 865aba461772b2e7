"""Cases of the training group's collectives that join a real gloo group of one in this process (the way torchrun's
ranks join). Run by tests/tasks/training/test_collectives.py in an interpreter of their own: a test session's
in-process vLLM engine holds the process's default process group, and a process has only one. Also runnable
directly: `pytest tests/tasks/training/one_rank_cases.py`."""

import pytest
import torch
import torch.distributed as dist
from conftest import free_port

from rlep.tasks.bench.update import model_config, synthetic_batch
from rlep.tasks.settings.backend import DdpBackend
from rlep.tasks.settings.train import LossConfig, OptimizerConfig
from rlep.tasks.training.backends.policy import PolicySpec
from rlep.tasks.training.backends.sharding import Sharding
from rlep.tasks.training.maths.update import UpdateSettings

TINY = model_config("tiny")


@pytest.fixture
def one_rank(monkeypatch):
    """This process as rank 0 of a gloo group of 1, joined the way torchrun's ranks join."""
    from rlep.tasks.training.backends import distributed

    for name, value in dict(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1").items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    distributed.init_distributed(DdpBackend(nproc=1, collective_timeout=15))
    yield distributed
    distributed.shutdown()


def test_the_metric_reduction_hands_nccl_a_tensor_on_the_groups_device(one_rank, monkeypatch):
    """The group declared on another device (`meta` stands in for the rank's GPU) and an all-reduce that, like
    NCCL, refuses tensors elsewhere: the metrics' sums must reach it on that device."""
    from rlep.tasks.training.backends import collectives

    class Reduced(Exception):
        """Raised by the stand-in once it has seen a tensor it accepts (a meta tensor holds no values to read)."""

    def nccl_all_reduce(tensor, *args, **kwargs):
        if tensor.device != torch.device("meta"):
            raise RuntimeError(f"No backend type associated with device type {tensor.device.type}")
        raise Reduced(tensor.dtype, tuple(tensor.shape))

    monkeypatch.setattr(collectives.GROUP, "device", torch.device("meta"))
    monkeypatch.setattr(dist, "all_reduce", nccl_all_reduce)
    with pytest.raises(Reduced) as reduced:
        Sharding(0, 1).all_reduce([1.0, 2.0, 3.0])
    assert reduced.value.args == (torch.float64, (3,))


def test_the_metric_reduction_sums_on_a_gloo_group(one_rank):
    from rlep.tasks.training.backends import collectives

    assert collectives.GROUP.device == torch.device("cpu")
    assert Sharding(0, 1).all_reduce([1.0, 2.5]) == [1.0, 2.5]


def _failing_update(one_rank, monkeypatch, error):
    def policy_update(*args, **kwargs):
        raise error

    spec = PolicySpec(TINY, OptimizerConfig(), DdpBackend(nproc=1, precision="fp32"))
    backend = one_rank.DistributedBackend.lead(spec)
    monkeypatch.setattr(one_rank, "policy_update", policy_update)
    batch = synthetic_batch(2, 2, 4, 5, TINY.vocab_size, seed=0)
    return lambda: backend.update(batch, UpdateSettings(LossConfig(), 1.0, micro_batch_size=16))


@pytest.mark.parametrize(
    "error",
    [
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 79 GiB"),
        RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported"),
        RuntimeError(
            "[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: not enough memory: you tried to allocate"
        ),
    ],
    ids=["torch-oom", "cuda-error", "cpu-allocator"],
)
def test_out_of_memory_in_the_update_names_the_rank_and_the_micro_batch_size(one_rank, monkeypatch, error):
    update = _failing_update(one_rank, monkeypatch, error)
    with pytest.raises(MemoryError) as raised:
        update()
    message = str(raised.value)
    assert message.startswith("rank 0 of 1 ran out of memory during the policy update")
    assert "micro_batch_size 16" in message and "--micro-batch-size 8" in message
    assert "another training process" not in message and not isinstance(raised.value, one_rank.DistributedError)
    assert raised.value.__cause__ is error


def test_a_bug_in_the_update_is_not_reported_as_a_lost_rank(one_rank, monkeypatch):
    bug = RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x64 and 32x64)")
    with pytest.raises(RuntimeError) as raised:
        _failing_update(one_rank, monkeypatch, bug)()
    assert raised.value is bug


def test_a_lost_rank_in_the_update_is_still_one_clear_error(one_rank, monkeypatch):
    lost = dist.DistNetworkError("Connection closed by peer [127.0.0.1]:29500")
    with pytest.raises(one_rank.DistributedError, match="another training process stopped or did not answer"):
        _failing_update(one_rank, monkeypatch, lost)()


def _native_threads() -> int:
    import gc
    import os

    gc.collect()  # groups an earlier case left to the collector end here
    return len(os.listdir("/proc/self/task"))  # every thread, the C++ ones too (threading sees only Python's)


def test_shutdown_joins_the_groups_threads_while_python_runs(monkeypatch):
    """A gloo group's worker threads must end in `shutdown`, not at interpreter exit: a worker still holding its
    last finished broadcast then needs the GIL, is stopped inside a destructor, and the rank aborts
    ("terminate called without an active exception"; one launched benchmark in five on 2 CPUs)."""
    from rlep.tasks.training.backends import distributed

    for name, value in dict(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1").items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    before = _native_threads()
    distributed.init_distributed(DdpBackend(nproc=1, collective_timeout=15))
    distributed.stop_serving()  # a request broadcast on the command group, as rank 0 sends its last
    assert _native_threads() > before  # each group runs worker and transport threads
    distributed.shutdown()
    assert _native_threads() == before


def test_a_tensor_the_weights_lack_is_named_not_left_as_allocated(one_rank):
    """Rank 0 loads in chunks with strict=False (each chunk names only its tensors), so a name no chunk held is
    checked at the end: an error naming it, not a parameter left holding `to_empty`'s garbage."""
    from rlep.tasks.training.backends.meta_load import build_on_meta_and_load, read_state_dict_chunks

    def without_a_norm(weights, dtype, init_seed):
        for chunk in read_state_dict_chunks(weights, dtype, init_seed):
            yield {name: value for name, value in chunk.items() if name != "model.norm.weight"}

    with pytest.raises(KeyError, match=r"no value for 1 of the model's tensors: \['model.norm.weight'\]"):
        build_on_meta_and_load(TINY, torch.device("cpu"), torch.float32, lambda model: None, reader=without_a_norm)
    model = build_on_meta_and_load(TINY, torch.device("cpu"), torch.float32, lambda model: None)
    assert model.lm_head.weight is model.model.embed_tokens.weight
