"""The harness of the torch.distributed tests (test_distributed*.py): 2 CPU ranks on gloo, started by
torch.multiprocessing from a forkserver, on a tiny random Qwen2 built in code (no vLLM, nothing downloaded), and
the batch, policy and update settings every such test shares."""

import multiprocessing
import os
from pathlib import Path

import torch
import torch.multiprocessing as mp
from conftest import free_port

from rlep.tasks.bench.update import model_config, synthetic_batch
from rlep.tasks.settings.backend import DdpBackend, backend_config
from rlep.tasks.settings.train import LossConfig, OptimizerConfig
from rlep.tasks.training.backends.backend import LocalBackend
from rlep.tasks.training.backends.policy import PolicySpec
from rlep.tasks.training.maths.update import UpdateSettings

TINY = model_config("tiny")
# Adam's step is ~lr whatever the gradient, so parameters with a near-zero gradient (key biases: softmax ignores
# a shift) move by float noise times lr; 1e-4 keeps that noise well under the 1e-5 tolerance.
LR = 1e-4
UPDATE = dict(ppo_epochs=2, updates_per_epoch=2, micro_batch_size=2, horizon=9)
TINY_INIT = LocalBackend(PolicySpec(TINY, OptimizerConfig(), init_seed=5)).full_state_dict()
# Ranks are forked from one forkserver per test process that has imported what every rank imports: a fresh
# spawn spends about 3 s of a core per rank on torch and transformers alone. Only imports run there, no torch op
# (this module, whose TINY_INIT builds a model, is imported by each rank): a process forked after OpenMP has
# started its threads can hang in its own first parallel region (GNU libgomp).
PRELOAD = ["torch", "torch.distributed.fsdp", "transformers", "rlep.tasks.training.backends.distributed"]


def mixed_batch(seed=0):
    """5 prompt groups of 3 (uneven over 2 ranks), answers of 1..9 tokens, the last two rows loose (replayed)."""
    batch = synthetic_batch(5, 3, 4, 9, TINY.vocab_size, seed=seed, varied=True)
    batch.group[-2:] = -1
    batch.is_replay[-2:] = True
    return batch


def spec(strategy="ddp", weights=TINY, **backend):
    config = backend_config(nproc=2, strategy=strategy, collective_timeout=15, **{"precision": "fp32", **backend})
    return PolicySpec(weights, OptimizerConfig(lr=LR), config, init_seed=5)


def run_update(backend, aggregation, seed=0):
    return backend.update(
        mixed_batch(seed),
        UpdateSettings(LossConfig(aggregation=aggregation), 1.0, **UPDATE),
        generator=torch.Generator().manual_seed(7),
    )


class NoTokenizer:
    def save_pretrained(self, directory):
        pass


def rank_main(rank, world, port, scenario, args, out, follower=None):
    """One rank: join the group, rank 0 runs `scenario` and saves its result, the others serve.
    `follower(distributed)`, when given, runs on the other ranks before they serve (a rank made to die on
    purpose); then no rank shuts the group down, which a lost rank leaves unusable."""
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    torch.set_num_threads(1)
    from rlep.tasks.training.backends import distributed

    distributed.init_distributed(DdpBackend(nproc=world, collective_timeout=15))
    assert "RANK" not in os.environ and "MASTER_ADDR" not in os.environ  # nothing left for a vLLM engine to join
    try:
        if rank == 0:
            try:
                result = scenario(*args)
            except Exception as err:  # the test asserts on the error rank 0 saw
                result = {"error": err, "type": type(err).__name__}
            with __import__("contextlib").suppress(distributed.DistributedError):
                distributed.stop_serving()
            torch.save(result, Path(out) / "result.pt")
        else:
            if follower is not None:
                follower(distributed)
            distributed.serve()
    finally:
        if follower is None:
            distributed.shutdown()


def spawn(scenario, *args, tmp_path, follower=None):
    """Run `scenario` on rank 0 of 2 ranks (`start_ranks`); its result. Each rank is waited for on its own (a rank
    that dies on purpose must not make the harness kill rank 0 before it reports)."""
    context = start_ranks(rank_main, (2, free_port(), scenario, args, str(tmp_path), follower), join=False)
    for process in context.processes:
        process.join(timeout=120)
    alive = [p.pid for p in context.processes if p.is_alive()]
    for process in context.processes:
        if process.is_alive():
            process.kill()
    assert not alive, f"ranks still running after 120 s: {alive}"
    return torch.load(tmp_path / "result.pt", weights_only=False)


def _every_rank(rank, world, port, scenario, args, out):
    """One rank of a scenario every rank runs in full (no rank 0 driving): its result in result-RANK.pt."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        torch.save(scenario(rank, *args), Path(out) / f"result-{rank}.pt")
    finally:
        dist.destroy_process_group()
    _leave_without_teardown()


def _leave_without_teardown() -> None:
    """End a rank whose result is saved without the interpreter's teardown. A model sharded by FSDP2 keeps its
    gloo group alive past `destroy_process_group` and a garbage collection (its two `pt_gloo_runloop` threads
    stay, held outside Python; DDP's go), and that group destroyed at exit can abort the rank ("terminate called
    without an active exception", once in CI on 2 cores). A scenario's failure still raises before this."""
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def spawn_every_rank(scenario, *args, tmp_path):
    """Run `scenario(rank, *args)` on each of 2 ranks (`start_ranks`); their results in rank order."""
    start_ranks(_every_rank, (2, free_port(), scenario, args, str(tmp_path)), join=True)
    return [torch.load(tmp_path / f"result-{rank}.pt", weights_only=False) for rank in range(2)]


def start_ranks(rank_fn, args, join):
    """`rank_fn(rank, *args)` on 2 ranks forked from the forkserver (see PRELOAD), as `mp.spawn` runs it, with one
    difference: the ranks see the environment the forkserver started with, not a variable set later (pass it in
    `args`)."""
    multiprocessing.set_forkserver_preload(PRELOAD)  # read when the forkserver starts, the first time only
    return mp.start_processes(rank_fn, args=args, nprocs=2, join=join, start_method="forkserver")
