"""The generator process of async training: one engine, fed prompts and new weights in one ordered stream.

Run by `tasks.training.generation.async_gen.GeneratorProcess` as a fresh interpreter (`python -m
tasks.training.generation.generator_worker FD`), not a `multiprocessing` child: a spawned child re-imports the
caller's `__main__` (a user's script without a main guard would run again), and a forked one inherits
torch's and vLLM's threads. It talks over the socket FD with `multiprocessing.connection` messages:

    in:  ("weights_buffer", opening) first: the bucket buffer shared with the trainer, opened once
                                          (tasks/training/generation/weight_transport.py: shared memory, or CUDA IPC)
         ("weights", version), then ("weights_bucket", header) per bucket written into that buffer,
                                          ("weights_end",): policy `version`, loaded in place as the buckets arrive
                                          (tasks/training/generation/weight_sync.py: never the whole model at once)
         ("generate", tag, prompts, sampling) answers with the weights loaded *now*
         ("stop",)
    out: ("ready", pid, dtype) once the engine is up (dtype: what weights are sent in);
         ("bucket_read",) once a bucket is loaded: the trainer may write the next one into the buffer;
         ("generated", tag, version, completions, busy_s, idle_s);
         ("error", traceback) before exiting on any failure

Messages are handled strictly in order, so what weights a request is generated with is fixed by when the
trainer sent it, not by timing: the staleness of every rollout is reproducible (see async_gen).

The process pins itself to the cores it is given before torch is imported (one OpenMP thread per core),
ignores Ctrl-C (the trainer stops it: one interrupt, one orderly shutdown), and exits when the trainer's
end of the socket closes or the trainer process disappears, so it never outlives it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections import deque
from multiprocessing.connection import Connection

# Test hook: seconds slept before each generation, to slow the generator down on purpose.
DELAY_ENV = "RLEP_GENERATOR_DELAY"


def _watch_parent(parent: int) -> None:
    """Exit as soon as the trainer process is gone (even SIGKILLed mid-generation)."""
    while True:
        if os.getppid() != parent:
            os._exit(3)
        time.sleep(0.5)


def serve(conn: Connection, model: str, engine_settings: dict, version: int) -> None:
    from rlep.tasks.engines import make_engine
    from rlep.tasks.settings.engine import EngineConfig, SamplingConfig
    from rlep.tasks.training.generation.weight_sync import receive_weights
    from rlep.tasks.training.generation.weight_transport import open_bucket

    engine = make_engine(model, EngineConfig.model_validate(engine_settings))
    delay = float(os.environ.get(DELAY_ENV, "0") or 0)
    conn.send(("ready", os.getpid(), str(engine.weight_dtype).removeprefix("torch.")))
    idle = 0.0
    buffer = None
    while True:
        waiting = time.perf_counter()
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return  # the trainer went away
        idle += time.perf_counter() - waiting
        kind = message[0]
        if kind == "stop":
            engine.close()
            return
        if kind == "weights_buffer":
            buffer = open_bucket(message[1])
        elif kind == "weights":
            version = message[1]
            stream = receive_weights(conn.recv, buffer, lambda: conn.send(("bucket_read",)))
            engine.load_weights(stream)
            deque(stream, maxlen=0)  # an engine that stopped short must not leave buckets to be read as requests
        elif kind == "generate":
            _, tag, prompts, sampling = message
            start = time.perf_counter()
            if delay:
                time.sleep(delay)
            completions = engine.generate(prompts, SamplingConfig.model_validate(sampling))
            conn.send(("generated", tag, version, completions, time.perf_counter() - start, idle))
            idle = 0.0
        else:
            raise ValueError(f"generator: unknown message {kind!r}")


def main() -> None:
    fd, parent, model, version = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    settings, cores = json.loads(sys.argv[5]), json.loads(sys.argv[6])
    if cores:
        os.sched_setaffinity(0, cores)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    conn = Connection(socket.socket(fileno=fd).detach())
    try:
        serve(conn, model, settings, version)
    except BaseException:  # report, then exit: the trainer raises it with this text
        try:
            conn.send(("error", traceback.format_exc()))
        except OSError:
            pass
        sys.exit(1)


if __name__ == "__main__":
    from rlep.tasks.quick_exit import run_then_exit

    sys.exit(run_then_exit(main))
