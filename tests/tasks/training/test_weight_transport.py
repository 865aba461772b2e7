"""Weights into generator processes through one shared bucket: which transport the placement picks, that a process
maps one buffer of the bucket's size and gets only metadata over its socket, that a pool's engines read the same
bucket in parallel, and that the shared memory is gone after a normal end, an error and a SIGKILL."""

import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from conftest import assert_samples_from, process_running

from rlep.tasks.runner import module_env
from rlep.tasks.settings.backend import backend_config
from rlep.tasks.settings.engine import EngineConfig, SamplingConfig
from rlep.tasks.settings.train import OptimizerConfig
from rlep.tasks.training.backends.backend import LocalBackend
from rlep.tasks.training.backends.policy import PolicySpec
from rlep.tasks.training.generation.async_gen import GeneratorError, GeneratorProcess
from rlep.tasks.training.generation.generator_pool import GeneratorPool, start_generator
from rlep.tasks.training.generation.placement import update_device
from rlep.tasks.training.generation.weight_transport import (
    MEMFD_NAME,
    CudaIpcBucket,
    SharedMemoryBucket,
    bucket_for,
    choose_transport,
    make_bucket,
)

MIB = 1 << 20
PROMPTS = ["Q: 3+4=?\nA: ", "Q: 12*3=?\nA: ", "Q: 9-5=?\nA: "]


def shared_buckets(pid: int) -> dict[int, int]:
    """The weights buckets process `pid` maps: inode -> bytes mapped (empty once the process is gone)."""
    found: dict[int, int] = {}
    try:
        with open(f"/proc/{pid}/maps") as f:
            lines = f.read().splitlines()
    except (FileNotFoundError, ProcessLookupError, PermissionError):  # gone, or not a process of ours
        return found
    for line in lines:
        if f"/memfd:{MEMFD_NAME}" in line:
            span, _, _, _, inode = line.split()[:5]
            start, end = (int(x, 16) for x in span.split("-"))
            found[int(inode)] = found.get(int(inode), 0) + end - start
    return found


def mapped_by_anyone(inode: int) -> list[int]:
    """Every process that still maps the bucket `inode` (its memory is freed once there is none)."""
    return [int(pid) for pid in os.listdir("/proc") if pid.isdigit() and inode in shared_buckets(int(pid))]


def no_named_segments() -> list[str]:
    return [name for name in os.listdir("/dev/shm") if "rlep" in name]


def eventually(condition, seconds=20.0):
    end = time.time() + seconds
    while not condition():
        if time.time() > end:
            return False
        time.sleep(0.1)
    return True


@pytest.fixture
def policy(fixture_model):
    policy = LocalBackend(PolicySpec(fixture_model, OptimizerConfig(), backend_config(precision="fp32")))
    torch.manual_seed(0)
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    return policy


def test_the_transport_follows_the_placement():
    assert choose_transport([], "cpu") == "shared-memory"
    assert choose_transport([], "cuda") == "cuda-ipc"  # trainer and generator on the default GPU
    assert choose_transport([1], "cuda:0") == "shared-memory"  # a generator on GPUs of its own: through the host
    here = update_device([], torch.cuda.device_count())  # the CPU here; the default GPU on a machine with one
    chosen = bucket_for([], 4096)
    try:
        assert isinstance(chosen, CudaIpcBucket if here.startswith("cuda") else SharedMemoryBucket), here
    finally:
        chosen.close()
    bucket = make_bucket("shared-memory", 4096)
    try:
        assert bucket.opening() == ("shared-memory", bucket.fd, 4096)  # all a generator needs, beside the fd
        assert bucket.buffer.numel() == 4096 and shared_buckets(os.getpid())
    finally:
        bucket.close()
    assert isinstance(make_bucket("shared-memory", 64), SharedMemoryBucket)
    if not torch.cuda.is_available():
        with pytest.raises((AssertionError, RuntimeError)):  # CPU-only torch: no CUDA buffer to share
            make_bucket("cuda-ipc", 64, "cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA IPC needs a GPU (passed on an H200, 2026-11-29)")
def test_a_cuda_ipc_bucket_opens_in_another_process():  # pragma: no cover - CI has no GPU
    bucket = make_bucket("cuda-ipc", MIB, "cuda")
    assert isinstance(bucket, CudaIpcBucket)
    bucket.buffer[:4].copy_(torch.tensor([1, 2, 3, 4], dtype=torch.uint8))
    bucket.written()
    script = textwrap.dedent(
        """
        import pickle, sys
        from rlep.tasks.training.generation.weight_transport import open_bucket
        buffer = open_bucket(pickle.loads(sys.stdin.buffer.read()))
        print(buffer[:4].tolist(), buffer.numel())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], input=pickle.dumps(bucket.opening()), capture_output=True, env=module_env()
    )
    assert done.stdout.decode().split("\n")[0] == f"[1, 2, 3, 4] {MIB}", done.stderr.decode()
    bucket.close()


def test_a_generator_reads_every_bucket_from_one_shared_buffer_of_the_bucket_size(policy, fixture_model):
    """Both processes map the same buffer of exactly the bucket's size; every bucket of every sync is written into it;
    the socket carries only metadata (no tensor, no payload); the engine's weights are the trainer's after a sync."""
    generator = GeneratorProcess(fixture_model, EngineConfig(backend="transformers", sync_bucket_mb=1), version=0)
    sent = []
    send = generator._send
    generator._send = lambda message: (sent.append(message), send(message))[1]
    try:
        buffer = generator.transport.buffer
        writes = set()
        generator.bucket_bytes = 16 * 1024  # many buckets through the same 1 MiB buffer
        for version in (1, 2):
            generator.push_weights(policy.named_weights(generator.weight_dtype), version=version)
            writes.add(generator.transport.buffer.data_ptr())
        completions = generator.generate(PROMPTS, SamplingConfig(n=2, temperature=1.0, max_tokens=12, seed=3))
        theirs, ours = shared_buckets(generator.pid), shared_buckets(os.getpid())
    finally:
        generator.close()
    assert writes == {buffer.data_ptr()}  # one buffer for every bucket of both syncs
    [(inode, size)] = theirs.items()
    assert ours[inode] == size == MIB  # the trainer's buffer is the generator's, of the bucket's size
    buckets = [m for m in sent if m[0] == "weights_bucket"]
    weights = sum(t.numel() * t.element_size() for t in policy.model.state_dict().values())
    assert len(buckets) > 2 * 3  # both syncs in several 16 KiB buckets
    assert all(not isinstance(v, (torch.Tensor, bytes, bytearray)) for m in sent for v in m)
    assert sum(len(pickle.dumps(m)) for m in buckets) < weights / 10  # metadata only: names, shapes, offsets
    assert_samples_from(policy.model, completions, fixture_model)


def test_a_pool_reads_each_bucket_in_parallel_from_one_buffer(policy, fixture_model):
    """Two engines map the same buffer; each bucket is announced to both before either is waited for; both end with
    the trainer's weights."""
    pool = start_generator(fixture_model, EngineConfig(backend="transformers"), 0, 2, cores=[], gpus=[])
    events = []
    try:
        assert isinstance(pool, GeneratorPool)
        for i, member in enumerate(pool.processes):
            send, wait = member._send, member.wait_read
            member._send = lambda m, i=i, send=send: (events.append((m[0], i)), send(m))[1]
            member.wait_read = lambda what, i=i, wait=wait: (events.append(("wait", i)), wait(what))[1]
        pool.bucket_bytes = 16 * 1024
        pool.push_weights(policy.named_weights(pool.weight_dtype), version=1)
        pool.submit(("step", 1), PROMPTS, SamplingConfig(n=2, temperature=1.0, max_tokens=12, seed=3))
        completions, version, _, _ = pool.receive(("step", 1))
        maps = [shared_buckets(pid) for pid in pool.pids]
    finally:
        pool.close()
    assert version == 1 and len(maps[0]) == 1 and maps[0] == maps[1]  # the same buffer in both
    # Before each bucket is written both have read the one before; then it is announced to both at once.
    buckets = [e for e in events if e[0] in ("weights_bucket", "wait")]
    one_bucket = [("wait", 0), ("wait", 1), ("weights_bucket", 0), ("weights_bucket", 1)]
    assert len(buckets) > 3 * 4 and buckets == one_bucket * (len(buckets) // 4)
    assert_samples_from(policy.model, completions, fixture_model)


def test_the_shared_buffer_is_gone_after_a_normal_end_and_an_error(policy, fixture_model):
    generator = GeneratorProcess(fixture_model, EngineConfig(backend="transformers"), version=0)
    fd = generator.transport.fd
    generator.push_weights(policy.named_weights(generator.weight_dtype), version=1)
    generator.generate(PROMPTS[:1], SamplingConfig(temperature=0, max_tokens=2))
    [inode] = shared_buckets(generator.pid)
    generator.close()
    assert not process_running(generator.pid) and mapped_by_anyone(inode) == []
    with pytest.raises(OSError):
        os.fstat(fd)
    # An error: the generator dies before the sync; the trainer's push fails, and closing releases the buffer.
    generator = GeneratorProcess(fixture_model, EngineConfig(backend="transformers"), version=0)
    generator.generate(PROMPTS[:1], SamplingConfig(temperature=0, max_tokens=2))  # the buffer is open by now
    [inode] = shared_buckets(generator.pid)
    os.kill(generator.pid, signal.SIGKILL)
    generator.bucket_bytes = 4096
    with pytest.raises(GeneratorError):  # the first push after the kill fails
        generator.push_weights(policy.named_weights(generator.weight_dtype), version=1)
    generator.close()
    assert mapped_by_anyone(inode) == [] and no_named_segments() == []


@pytest.mark.slow
def test_the_shared_buffer_is_gone_after_the_trainer_is_killed(fixture_model):
    """A trainer SIGKILLed mid-run leaves no shared memory: nothing was ever named in /dev/shm, and the anonymous
    buffer goes with the generator, which exits when its parent is gone."""
    script = textwrap.dedent(
        f"""
        import os, sys, time
        from rlep.tasks.settings.engine import EngineConfig, SamplingConfig
        from rlep.tasks.training.generation.async_gen import GeneratorProcess
        from rlep.tasks.training.backends.backend import LocalBackend
        from rlep.tasks.settings.train import OptimizerConfig
        from rlep.tasks.training.backends.policy import PolicySpec
        policy = LocalBackend(PolicySpec({fixture_model!r}, OptimizerConfig()))
        generator = GeneratorProcess({fixture_model!r}, EngineConfig(backend="transformers"), version=0)
        generator.push_weights(policy.named_weights(generator.weight_dtype), version=1)
        generator.generate(["1+1="], SamplingConfig(temperature=0, max_tokens=2))
        print(generator.pid, flush=True)
        time.sleep(600)
        """
    )
    trainer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=module_env(), text=True)
    try:
        generator = int(trainer.stdout.readline())
        [inode] = shared_buckets(generator)
        assert inode in shared_buckets(trainer.pid)
        os.kill(trainer.pid, signal.SIGKILL)
        trainer.wait()
        assert eventually(lambda: not process_running(generator)), "the generator outlived its killed trainer"
        assert mapped_by_anyone(inode) == [] and no_named_segments() == []
    finally:
        if trainer.poll() is None:
            trainer.kill()
