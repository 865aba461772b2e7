"""Where a step's fresh rollouts come from: sampled when the step needs them (`mode: sync`), or generated
ahead by a generator process while the trainer updates (`mode: async`, the setting of the FIFO replay
paper, arXiv 2604.08706, and of verl's fully-async mode / PipelineRL / AReaL on GPU clusters).

Async, with `max_staleness` = L: the generator process (tasks.training.generation.generator_worker) owns its own
engine and handles one ordered stream of messages: prompts to generate, and the new weights after each
update. The request for step t is sent only once the weights of version t-1-L have been sent before it, so
its rollouts come from a policy at most L updates older than the one that trains on them (staleness =
(t - 1) - policy_version: at step t the trainer updates version t-1). With L = 1 the generator samples
step t+1 with version t-1 while the trainer trains step t: one step off-policy, the two overlapped.
Because the stream is ordered, the version each request sees is fixed by the order of messages and not
by which side is faster, so a run (and its resume) is reproducible. A rollout that arrives beyond the
bound anyway is dropped, counted (`dropped_stale`) and its step regenerated with the newest weights.

A checkpoint stores what is needed to resume without losing or repeating a rollout: the answers already
generated for the next steps (by weights older than the checkpoint's, which are not saved), and the
prompts drawn for any later step. On resume those steps train on the stored answers.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlep.data.problem import Problem, render_prompt
from rlep.tasks.engines import Completion, GenerationEngine
from rlep.tasks.runner import module_env
from rlep.tasks.settings.engine import EngineConfig, SamplingConfig
from rlep.tasks.training.generation.placement import CoreShare as CoreShare  # re-exported: where async training runs
from rlep.tasks.training.generation.placement import generator_gpu_env
from rlep.tasks.training.generation.placement import split_cores as split_cores
from rlep.tasks.training.generation.placement import update_device as update_device
from rlep.tasks.training.generation.weight_sync import Entry, GatheredWeights, send_weights
from rlep.tasks.training.generation.weight_transport import Bucket, bucket_for

STOP_TIMEOUT_SECONDS = 10.0  # an orderly stop of the generator; after that it is killed


class GeneratorError(RuntimeError):
    """The generator process failed, died or did not answer in time (`engine.generator_timeout`); the message
    carries its traceback or exit code, or what was waited for."""


def request_name(tag: Any) -> str:
    """A request's tag in words: `("step", 5)` is step 5's request, `("now", k)` an evaluation's."""
    return f"step {tag[1]}'s request" if tag[0] == "step" else "an evaluation's request"


class AnsweredLater:
    """A generator that answers requests later (`submit` / `receive`) used as a blocking `GenerationEngine` too
    (evaluation). Its weights arrive by `push_weights`, which names their policy version."""

    _eval_count = 0

    def generate(
        self, prompts: Sequence[str], sampling: SamplingConfig, progress: bool = False
    ) -> list[list[Completion]]:
        self._eval_count += 1
        tag = ("now", self._eval_count)
        self.submit(tag, prompts, sampling)
        return self.receive(tag)[0]

    processes: list[GeneratorProcess]  # the generator processes behind it (one, or a pool's)
    transport: Bucket  # the buffer every process reads the weights from (tasks/training/generation/weight_transport.py)
    bucket_bytes: int  # the most one bucket holds (at most the buffer's size)

    def push_weights(self, weights: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Policy `version`'s weights, streamed (tasks/training/generation/weight_sync.py): read once, a bucket at a
        time, into the one buffer every process maps; each bucket's header goes to every process at once and they load
        it in parallel, after the requests sent before; the next bucket is written once all have acknowledged (the last
        one's acknowledgements are waited for by the next write, not here). Weights gathered by collectives of the
        training ranks (`GatheredWeights`, FSDP2) are read only once every process has answered the requests sent before
        (`wait_idle`, outside any collective): the buckets then go to processes already listening, and no rank waits
        inside a gather for a generation."""
        what = f"policy version {version}'s weights"
        if isinstance(weights, GatheredWeights):
            for process in self.processes:
                process.wait_idle(what)
        for process in self.processes:
            process._send(("weights", version))

        def reusable() -> None:
            for process in self.processes:
                process.wait_read(f"a bucket of {what}")

        def publish(header: list[Entry]) -> None:
            self.transport.written()
            for process in self.processes:
                process._send(("weights_bucket", header))
                process.unread += 1

        send_weights(weights, self.transport.buffer, publish, reusable, self.bucket_bytes)
        for process in self.processes:
            process._send(("weights_end",))

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        raise TypeError(f"{type(self).__name__}.push_weights names the policy version the weights are")


class GeneratorProcess(AnsweredLater):
    """Trainer-side handle of the generator process: a `GenerationEngine` (blocking `generate`, used by
    evaluation) plus `submit` / `receive` for requests answered later and `push_weights` (streamed in buckets
    through `transport`: its own, or a pool's `bucket` shared by every process of the pool)."""

    name = "generator-process"

    def __init__(
        self,
        model: str | Path,
        config: EngineConfig,
        version: int,
        cores: Sequence[int] = (),
        gpus: Sequence[int] = (),
        bucket: Bucket | None = None,
    ) -> None:
        self.bucket_bytes = config.sync_bucket_mb << 20
        self.owns_transport = bucket is None
        self.transport = bucket_for(gpus, self.bucket_bytes) if bucket is None else bucket
        try:
            ours, theirs = socket.socketpair()
        except BaseException:
            self._close_transport()
            raise
        self.timeout = config.generator_timeout  # seconds any one wait on this process may last
        self.processes = [self]  # a pool of one, for the shared push_weights
        self.unread = 0  # buckets announced to the process that it has not acknowledged yet
        if config.sleep_during_update == "auto":  # on its own GPU (or the CPU): nothing to share with an update
            config = config.model_copy(update={"sleep_during_update": False})
        env = module_env(VLLM_ENABLE_V1_MULTIPROCESSING="0")
        if cores:
            env.update(OMP_NUM_THREADS=str(len(cores)), VLLM_CPU_OMP_THREADS_BIND=",".join(map(str, cores)))
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = generator_gpu_env(gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))
        args = [
            sys.executable,
            "-m",
            "rlep.tasks.training.generation.generator_worker",
            str(theirs.fileno()),
            str(os.getpid()),
            str(model),
            str(version),
            config.model_dump_json(),
            json.dumps(list(cores)),
        ]
        try:
            self.proc = subprocess.Popen(args, pass_fds=[theirs.fileno(), *self.transport.pass_fds()], env=env)
        except BaseException:
            self._close_transport()
            raise
        finally:
            theirs.close()
        from multiprocessing.connection import Connection

        self.conn = Connection(ours.detach())
        self.pid = self.proc.pid
        self.arrived: dict[Any, tuple] = {}  # answers by tag, kept for their `receive`
        self.ready: tuple | None = None
        self.pending: set = set()  # tags submitted whose answers have not arrived: the generator is busy
        self.outbox: queue.Queue = queue.Queue()
        self.send_error: BaseException | None = None
        # Sends happen on their own thread: a request's prompts may exceed the socket buffer while the generator
        # is busy, and the trainer must not block on that.
        self.sender = threading.Thread(target=self._send_loop, name="generator-sender", daemon=True)
        self.sender.start()
        try:
            self._send(("weights_buffer", self.transport.opening()))  # opened once; every bucket goes through it
            self._wait(lambda: self.ready is not None, lambda: "did not report its engine ready")
            self.weight_dtype = getattr(torch, self.ready[2])
        except BaseException:
            self.close()
            raise

    def _send_loop(self) -> None:
        while (message := self.outbox.get()) is not None:
            try:
                self.conn.send(message)
            except OSError as error:
                self.send_error = error
                return

    def _send(self, message: tuple) -> None:
        if self.send_error is not None:
            raise GeneratorError(
                f"generator process {self.pid} cannot be reached: {self.send_error}"
            ) from self.send_error
        self.outbox.put(message)

    def wait_read(self, what: str) -> None:
        """Return once the process has acknowledged every bucket announced to it (it has finished loading them, after
        the request it was working on): the shared buffer may be written again. `what`: the bucket, in words."""
        self._wait(lambda: self.unread == 0, lambda: f"did not read {what}")

    def _late(self, what: str) -> GeneratorError:
        return GeneratorError(
            f"generator process {self.pid} {what} within {self.timeout:g}s (engine.generator_timeout; it is still "
            "running: raise --generator-timeout if it is this slow)"
        )

    def _read(self) -> None:
        """Take one message from the process: an answer is kept under its tag for its `receive`, a bucket's
        acknowledgement counted, the ready report kept; an error (or the process gone) raises."""
        try:
            message = self.conn.recv()
        except (EOFError, OSError):
            message = None
        if message is None or message[0] == "error":
            detail = message[1] if message else f"exit code {self.proc.wait(timeout=STOP_TIMEOUT_SECONDS)}"
            raise GeneratorError(f"generator process {self.pid} failed:\n{detail}")
        if message[0] == "bucket_read":
            self.unread -= 1
        elif message[0] == "ready":
            self.ready = message
        else:
            self.pending.discard(message[1])
            self.arrived[message[1]] = message

    def _wait(self, done: Callable[[], bool], late: Callable[[], str]) -> None:
        """Read messages until `done()`, within `timeout` seconds (`late()` says what the process did not do)."""
        deadline = time.monotonic() + self.timeout
        while not done():
            self._poll(deadline, late)
            self._read()

    def _poll(self, deadline: float, late: Callable[[], str]) -> None:
        """Return once a message can be read; raise if the process died or `deadline` passes first (`late()` says
        what it did not do)."""
        while not self.conn.poll(0.2):
            if self.proc.poll() is not None:
                raise GeneratorError(f"generator process {self.pid} died (exit code {self.proc.returncode})")
            if time.monotonic() > deadline:
                raise self._late(late())

    def wait_idle(self, before: str) -> None:
        """Return once every request sent so far has been answered (the answers are kept for their `receive`), so
        the process reads whatever is sent next at once; within `timeout` seconds. `before`: what waits for it."""

        def late() -> str:
            return f"did not answer {' and '.join(map(request_name, sorted(self.pending)))}, which {before} wait for,"

        self._wait(lambda: not self.pending, late)

    def busy(self) -> bool:
        """Whether the generator is working on a request now (answers that have arrived are kept; no wait)."""
        while self.pending and self.conn.poll(0):
            self._read()
        return bool(self.pending)

    def submit(self, tag: Any, prompts: Sequence[str], sampling: SamplingConfig) -> None:
        self._send(("generate", tag, list(prompts), sampling.model_dump()))
        self.pending.add(tag)

    def receive(self, tag: Any) -> tuple[list[list[Completion]], int, float, float]:
        """(completions, policy version that generated them, generator busy seconds, its idle seconds before)."""
        self._wait(lambda: tag in self.arrived, lambda: f"did not answer {request_name(tag)}")
        _, _, version, completions, busy, idle = self.arrived.pop(tag)
        return completions, version, busy, idle

    def close(self) -> None:
        """Stop the process: an orderly stop, then a kill if it does not exit in time. Never leaves it running.
        Its own transport (not a pool's) is released too."""
        if self.proc.poll() is None:
            self.outbox.put(("stop",))
        self.outbox.put(None)
        try:
            self.proc.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        finally:
            self.sender.join(timeout=1.0)
            self.conn.close()
            self._close_transport()

    def _close_transport(self) -> None:
        if self.owns_transport:
            self.transport.close()


@dataclass
class Arrival:
    """One step's fresh answers and what getting them cost. `version`: the policy that generated them."""

    problems: list[Problem]
    completions: list[list[Completion]]
    sampling: SamplingConfig
    version: int
    generate_seconds: float  # the engine busy on them
    wait_seconds: float = 0.0  # the trainer blocked waiting for them
    idle_seconds: float = 0.0  # the generator idle, waiting for work, before it made them
    dropped: int = 0  # answers generated beyond max_staleness, thrown away (the step was regenerated)


# A replay design's `plan`: (drawn prompts, step, G) -> the step's prompts, each with its count of fresh answers.
Plan = Callable[[list[Problem], int, int], list[tuple[Problem, int]]]


def generate_counts(
    engine: GenerationEngine, prompts: list[str], counts: list[int], sampling: SamplingConfig
) -> list[list[Completion]]:
    """`counts[i]` completions of `prompts[i]`, in prompt order: one engine call per distinct count, the first (the
    count `sampling.n`, or the first prompt's) with `sampling` as it is, so a step that plans nothing generates
    exactly as before; each further call samples on a stream of its own (seed + 2^31 x its index)."""
    order = sorted(set(counts), key=lambda n: (n != sampling.n, counts.index(n)))
    out: list[list[Completion] | None] = [None] * len(prompts)
    for i, n in enumerate(order):
        rows = [row for row, c in enumerate(counts) if c == n]
        seed = None if sampling.seed is None else sampling.seed + (1 << 31) * i
        request = sampling if i == 0 and n == sampling.n else sampling.model_copy(update={"n": n, "seed": seed})
        for row, group in zip(rows, engine.generate([prompts[row] for row in rows], request)):
            out[row] = group
    return out


class RolloutFeed:
    """Supplies each step's fresh answers in either mode; `publish` hands the engine the new weights."""

    def __init__(
        self,
        engine: GenerationEngine | GeneratorProcess,
        mode: str,
        max_staleness: int,
        last_step: int,
        draw: Callable[[], list[Problem]],
        sampling_for: Callable[[int], SamplingConfig],
        template: str,
        version: int,
        chat: Any = None,
    ) -> None:
        self.engine, self.mode, self.lookahead, self.last_step = engine, mode, max_staleness, last_step
        self.draw, self.sampling_for, self.template = draw, sampling_for, template
        self.chat = chat  # prompts are render_prompt(problem, template, chat), as everywhere (data.prompting)
        self.version = version  # the newest weights the engine has been given
        self.requested = version  # the last step whose prompts were drawn
        self.prompts: dict[int, list[Problem]] = {}  # drawn, not yet trained on
        self.submitted_at: dict[int, int] = {}  # step -> version published when it was requested
        self.ready: dict[int, Arrival] = {}  # restored from a checkpoint
        self.last_end: float | None = None

    def _problems(self, step: int) -> list[Problem]:
        while self.requested < step:
            self.requested += 1
            self.prompts[self.requested] = self.draw()
        return self.prompts[step]

    def _request(self, step: int) -> None:
        prompts = [render_prompt(p, self.template, self.chat) for p in self._problems(step)]
        self.engine.submit(("step", step), prompts, self.sampling_for(step))
        self.submitted_at[step] = self.version

    def take(self, step: int, plan: Plan | None = None) -> Arrival:
        """Step `step`'s fresh answers. `plan` (sync only; a replay design's `plan`) may put other prompts in place
        of drawn ones and ask fewer answers for them; async draws ahead and takes no plan (TrainConfig refuses a
        design that plans prompts there)."""
        if plan is not None and self.mode == "async":
            raise ValueError("a plan of the step's prompts needs mode sync (async draws them ahead)")
        if self.mode == "async":
            # Ahead: every step whose weights bound (version >= step - 1 - L) has been sent is requested.
            for later in range(step, min(self.version + 1 + self.lookahead, self.last_step) + 1):
                if later not in self.submitted_at and later not in self.ready:
                    self._request(later)
        if step in self.ready:
            arrival = self.ready.pop(step)
        elif self.mode == "sync":
            problems = self._problems(step)
            start = time.perf_counter()
            idle = start - self.last_end if self.last_end is not None else 0.0
            sampling = self.sampling_for(step)
            planned = plan(problems, step, sampling.n) if plan else [(p, sampling.n) for p in problems]
            problems = [p for p, _ in planned]
            prompts = [render_prompt(p, self.template, self.chat) for p in problems]
            completions = generate_counts(self.engine, prompts, [n for _, n in planned], sampling)
            busy = time.perf_counter() - start
            arrival = Arrival(problems, completions, sampling, step - 1, busy, wait_seconds=busy, idle_seconds=idle)
        else:
            arrival = self._receive(step)
            while (step - 1) - arrival.version > self.lookahead:
                dropped = arrival.dropped + sum(len(group) for group in arrival.completions)
                self._request(step)  # with the newest weights: staleness 0
                arrival = self._receive(step)
                arrival.dropped = dropped
        self.prompts.pop(step, None)
        self.submitted_at.pop(step, None)
        self.last_end = time.perf_counter()
        if self.mode == "sync":  # the update gets the device's memory; the engine wakes for the sync (vLLMEngine)
            getattr(self.engine, "sleep", lambda: None)()
        return arrival

    def _receive(self, step: int) -> Arrival:
        if step not in self.submitted_at:
            self._request(step)
        start = time.perf_counter()
        completions, version, busy, idle = self.engine.receive(("step", step))
        waited = time.perf_counter() - start
        return Arrival(self.prompts[step], completions, self.sampling_for(step), version, busy, waited, idle)

    def publish(self, step: int, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """The weights after step `step`'s update (policy version `step`) reach the engine, in place, streamed
        (the backend's `named_weights`)."""
        if self.mode == "sync":
            self.engine.load_weights(weights)
        else:
            self.engine.push_weights(weights, step)
        self.version = step

    def state_dict(self) -> dict[str, Any]:
        """Steps drawn but not trained on: their answers when generated by weights older than the current
        ones (waited for now), else their prompts (regenerated identically from the checkpoint's weights)."""
        answers, prompts = {}, {}
        for step in sorted(self.prompts):
            if step in self.ready or self.submitted_at.get(step, self.version) < self.version:
                arrival = self.ready.get(step) or self._receive(step)
                self.ready[step] = arrival
                answers[step] = {
                    "problems": arrival.problems,
                    "completions": arrival.completions,
                    "version": arrival.version,
                    "sampling": arrival.sampling.model_dump(),
                }
            else:
                prompts[step] = self.prompts[step]
        return {"requested": self.requested, "answers": answers, "prompts": prompts}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.requested = state["requested"]
        self.prompts = dict(state["prompts"])
        for step, a in state["answers"].items():
            self.prompts[step] = a["problems"]
            self.ready[step] = Arrival(
                a["problems"], a["completions"], SamplingConfig(**a["sampling"]), a["version"], 0.0
            )

    def close(self) -> None:
        self.engine.close()
