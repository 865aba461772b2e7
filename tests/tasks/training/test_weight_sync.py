"""Weight sync streamed in the engine's dtype: bounded buckets through one reused buffer, incremental loading, the
bf16 conversion, and vLLM's sleep around the update."""

import os
import threading
import weakref
from multiprocessing import Pipe

import pytest
import torch
from conftest import assert_samples_from

from rlep.tasks.engines import make_engine
from rlep.tasks.settings.backend import backend_config
from rlep.tasks.settings.engine import EngineConfig, SamplingConfig
from rlep.tasks.settings.train import OptimizerConfig
from rlep.tasks.training.backends.backend import LocalBackend
from rlep.tasks.training.backends.policy import PolicySpec
from rlep.tasks.training.generation.weight_sync import named_weights, nbytes, receive_weights, send_weights
from rlep.tasks.training.generation.weight_transport import SharedMemoryBucket, open_bucket

KIB = 1024


class Alive:
    """Wraps a (name, tensor) stream; at each tensor it takes, the bytes of the tensors it gave before that are
    still referenced somewhere (views of one buffer count once per view: an upper bound)."""

    def __init__(self, named):
        self.named, self.given, self.max_alive = named, [], 0

    def __iter__(self):
        for name, tensor in self.named:
            alive = sum(size for ref, size in self.given if ref() is not None)
            self.max_alive = max(self.max_alive, alive)
            self.given.append((weakref.ref(tensor), nbytes(tensor)))
            yield name, tensor
            del tensor


@pytest.fixture
def policy(fixture_model):
    fp32 = backend_config(precision="fp32")  # as vLLM samples: `auto` is bf16 autocast on a CPU with AVX512-BF16
    return LocalBackend(PolicySpec(fixture_model, OptimizerConfig(), fp32))


class OneBuffer:
    """Both sides of `send_weights` / `receive_weights` in one process: the sender on a thread, the buffer one
    tensor, each bucket acknowledged before the next is written (as by every generator process)."""

    def __init__(self, size):
        self.buffer = torch.zeros(size, dtype=torch.uint8)
        self.headers, self.messages, self.free = [], [], threading.Semaphore(1)

    def send(self, named, bucket_bytes=None):
        def publish(header):
            self.headers.append(header)
            self.messages.append(("weights_bucket", header))
            self.ready.release()

        def run():
            send_weights(named, self.buffer, publish, self.free.acquire, bucket_bytes)
            self.messages.append(("weights_end",))
            self.ready.release()

        self.ready = threading.Semaphore(0)
        threading.Thread(target=run, daemon=True).start()

    def receive(self):
        def recv():
            assert self.ready.acquire(timeout=10)
            return self.messages.pop(0)

        return receive_weights(recv, self.buffer, self.free.release)


def test_buckets_stay_within_the_bound_and_a_larger_tensor_crosses_in_pieces():
    named = [(f"t{i}", torch.full((n,), float(i))) for i, n in enumerate([100, 100, 100, 1000, 10, 10])]  # 4 B each
    one = OneBuffer(900)
    one.send(named)
    received = [(name, tensor.clone()) for name, tensor in one.receive()]
    pieces = [[(name, size) for name, _, _, _, _, size in header] for header in one.headers]
    # aligned offsets: 400 -> 448 + 400 fits, + 400 does not; the 4000-byte tensor in pieces of the buffer's 900
    assert pieces == [[("t0", 400), ("t1", 400)], [("t2", 400)], *[[("t3", n)] for n in (900,) * 4 + (400,)]] + [
        [("t4", 40), ("t5", 40)]
    ]
    assert [n for n, _ in received] == [n for n, _ in named]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(received, named))


def test_a_tensor_the_engine_still_holds_keeps_its_values_when_the_buffer_is_reused():
    """vLLM stages a layer's weights until all have come, across buckets: what it holds is moved out of the buffer
    before the buffer is acknowledged. A view it derived itself cannot be moved: that is refused, not loaded wrong."""
    named = [(f"t{i}", torch.full((64,), float(i))) for i in range(6)]  # 256 B each: one per 300-byte bucket
    one = OneBuffer(300)
    one.send(named)
    held = list(one.receive())  # every tensor kept until the end, as a staging engine would
    assert [n for n, _ in held] == [n for n, _ in named]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(held, named))
    assert all(t.untyped_storage().data_ptr() != one.buffer.untyped_storage().data_ptr() for _, t in held)
    one = OneBuffer(300)
    one.send(named)
    derived = []
    with pytest.raises(RuntimeError, match="kept a view of the shared weights bucket"):
        for _, tensor in one.receive():
            derived.append(tensor[:10])  # a view of the buffer the receiver cannot see


def test_a_view_the_writer_lets_go_of_before_announcing_its_first_bucket_is_not_the_engines():
    """The buffer's own uses are counted once the first bucket is announced: a writer on a thread of the receiver's
    process (as OneBuffer's) may hold a view while it copies when the receiver starts, and counting then would take
    that view's release for one the engine made (this test's writer stops at that point every time)."""
    buffer = torch.zeros(300, dtype=torch.uint8)
    messages = []
    send_weights(
        [("t0", torch.full((64,), 1.0))], buffer, lambda h: messages.append(("weights_bucket", h)), lambda: None
    )
    messages.append(("weights_end",))
    writing = [buffer[:256]]  # the writer's view while it copies

    def recv():
        writing.clear()  # gone by the time it announces the bucket
        return messages.pop(0)

    received = [(name, tensor.clone()) for name, tensor in receive_weights(recv, buffer, lambda: None)]
    assert [name for name, _ in received] == ["t0"] and torch.equal(received[0][1], torch.full((64,), 1.0))


def test_the_in_process_sync_holds_one_converted_tensor_at_a_time(policy, fixture_model):
    engine = make_engine(fixture_model, EngineConfig(backend="transformers", dtype="bfloat16"))
    assert engine.weight_dtype == torch.bfloat16
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(0.01)
    stream = Alive(policy.named_weights(engine.weight_dtype))
    engine.load_weights(stream)
    state = policy.model.state_dict()
    largest = max(nbytes(t.to(torch.bfloat16)) for t in state.values())
    assert len(stream.given) == len(state)
    assert stream.max_alive <= largest  # never two converted tensors at once
    for name, value in engine.model.state_dict().items():  # the bf16 conversion of the trainer's float32 weights
        assert value.dtype == torch.bfloat16 and torch.equal(value, state[name].to(torch.bfloat16)), name


def test_weights_cross_a_shared_buffer_in_bounded_buckets_and_load_as_they_arrive(policy, fixture_model):
    """The generator process's protocol (GeneratorProcess.push_weights -> generator_worker) through a real shared-memory
    bucket, both ends mapped, headers over a real pipe: only metadata goes through the pipe, every bucket is written
    into the same bucket-sized buffer, and each is loaded before the next is written."""
    trainer_end, generator_end = Pipe()
    engine = make_engine(fixture_model, EngineConfig(backend="transformers", dtype="bfloat16"))
    bound = 16 * KIB
    bucket = SharedMemoryBucket(bound)
    theirs = open_bucket(("shared-memory", os.dup(bucket.fd), bound))  # the generator's own mapping
    acks = threading.Semaphore(1)
    announced, read, written_at = [], [], set()

    def publish(header):
        written_at.add(bucket.buffer.untyped_storage().data_ptr())
        announced.append(header)
        trainer_end.send(("weights_bucket", header))

    def loaded_as_read(stream):
        for name, tensor in stream:
            read.append(len(announced))
            yield name, tensor

    produced = Alive(policy.named_weights(torch.bfloat16))

    def send():
        send_weights(produced, bucket.buffer, publish, lambda: acks.acquire(timeout=30))
        trainer_end.send(("weights_end",))

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    engine.load_weights(loaded_as_read(receive_weights(generator_end.recv, theirs, acks.release)))
    sender.join(timeout=30)
    bucket.close()
    state = policy.model.state_dict()
    whole = sum(nbytes(t.to(torch.bfloat16)) for t in state.values())
    largest = max(nbytes(t.to(torch.bfloat16)) for t in state.values())
    assert largest <= bound < whole and len(announced) > 3  # many buckets, through one buffer of the bucket's size
    assert len(written_at) == 1 and bucket.size == theirs.numel() == bound
    assert all(isinstance(value, (str, int, tuple)) for header in announced for entry in header for value in entry)
    assert produced.max_alive <= bound  # the trainer converts one bucket's tensors at a time
    assert read[0] == 1 and read == sorted(read) and read[-1] == len(announced)  # loaded bucket by bucket
    for name, value in engine.model.state_dict().items():
        assert torch.equal(value, state[name].to(torch.bfloat16)), name


def test_named_weights_yields_the_parameters_themselves_when_the_dtype_is_theirs(policy):
    params = {t.data_ptr() for t in policy.model.state_dict().values()}
    assert all(t.data_ptr() in params for _, t in named_weights(policy.model, torch.float32))  # no copy


class FakeLLM:
    """vLLM's LLM as far as sleep mode goes; fails if asked to generate or load while its memory is asleep."""

    def __init__(self):
        self.calls, self.sleeping = [], set()

    def sleep(self, level):
        self.calls.append(f"sleep{level}")
        self.sleeping = {"weights", "kv_cache"}

    def wake_up(self, tags=None):
        self.calls.append(f"wake{tags or ''}")
        self.sleeping -= set(tags or self.sleeping)

    def collective_rpc(self, method, kwargs):
        assert "weights" not in self.sleeping, "weights loaded while asleep"
        self.calls.append(method)
        list(kwargs["weights_iterator"])

    def reset_prefix_cache(self):
        pass

    def generate(self, prompts, params, **kwargs):
        assert not self.sleeping, "generating while asleep"
        self.calls.append("generate")
        return []


def _sleeping_engine(sleeps):
    import vllm

    from rlep.tasks.engines.vllm_engine import VLLMEngine

    engine = VLLMEngine.__new__(VLLMEngine)
    engine._vllm, engine._on_cpu, engine.llm = vllm, False, FakeLLM()
    engine.sleeps, engine.asleep = sleeps, False
    return engine


def test_the_engine_sleeps_through_the_update_and_wakes_for_sync_and_generation():
    from rlep.data.problem import Problem
    from rlep.tasks.training.generation.async_gen import RolloutFeed

    engine = _sleeping_engine(sleeps=True)
    problem = Problem(id="p", problem="1+1", answer="2", data_source="s")
    feed = RolloutFeed(engine, "sync", 0, 3, lambda: [problem], lambda s: SamplingConfig(n=2), "{problem}", 0)
    for step in (1, 2):
        feed.take(step)
        engine.llm.calls.append("update")  # the step's update runs here, with vLLM's memory released
        feed.publish(step, iter([("w", torch.zeros(1))]))
    step = ["sleep1", "update", "wake['weights']", "reload_weights"]  # wake the weights only to load them
    assert engine.llm.calls == ["generate", *step, "wake", "generate", *step]  # the rest wakes to generate
    awake = _sleeping_engine(sleeps=False)  # sleep mode off (the CPU): nothing but generation and reloads
    RolloutFeed(awake, "sync", 0, 3, lambda: [problem], lambda s: SamplingConfig(n=2), "{problem}", 0).take(1)
    assert awake.llm.calls == ["generate"]


def test_sleep_mode_is_on_where_vllm_has_it_and_refused_where_it_has_not():
    from rlep.tasks.engines.vllm_engine import sleeps_during_update

    assert sleeps_during_update("auto", available=True) and not sleeps_during_update("auto", available=False)
    assert not sleeps_during_update(False, available=True)
    with pytest.raises(ValueError, match="no sleep mode on this platform"):
        sleeps_during_update(True, available=False)


@pytest.mark.slow
def test_the_generator_process_samples_from_the_streamed_weights(policy, fixture_model):
    """Perturbed trainer weights, streamed in 16 KiB buckets to the generator process's vLLM: its behaviour log-probs
    are the trainer's own (as test_weight_sync_changes_vllm_to_match_the_torch_model checks in process)."""
    from rlep.tasks.training.generation.async_gen import GeneratorProcess

    prompts = ["Q: 3+4=?\nA: ", "Q: 12*3=?\nA: "]
    generator = GeneratorProcess(fixture_model, EngineConfig(backend="vllm", max_num_seqs=64), version=0)
    try:
        greedy = SamplingConfig(temperature=0, max_tokens=16)
        before = [g[0].token_ids for g in generator.generate(prompts, greedy)]
        torch.manual_seed(0)
        with torch.no_grad():
            for p in policy.model.parameters():
                p.add_(torch.randn_like(p) * 0.2)
        generator.bucket_bytes = 16 * KIB
        generator.push_weights(policy.named_weights(generator.weight_dtype), version=1)
        assert [g[0].token_ids for g in generator.generate(prompts, greedy)] != before
        sampled = generator.generate(prompts, SamplingConfig(n=4, temperature=0.7, max_tokens=16, seed=3))
    finally:
        generator.close()
    assert_samples_from(policy.model, sampled, fixture_model, temperature=0.7)
