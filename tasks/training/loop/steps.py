"""GRPO with experience replay: the training loop of one process, behind `rlep train` and `flows.train` (their entry
point, which also launches a distributed run's ranks, is `tasks.training.trainer.train`).

Each step reads top to bottom as named, timed phases:

    generate   G fresh answers per prompt from the vLLM engine (weights = current policy); `replay.plan` may put
               stored prompts in place of drawn ones, with G - 1 answers each (ExGRPO)
    verify     the fresh answers are checked by the sandboxed verifier and rewarded
    replay     `replay.join`: RLEP's M pooled answers (reuse: M banked ones, for all-wrong groups) join their
               prompt's group; refill puts a stored group in each flat group's place; ExGRPO completes each
               planned prompt's group with its stored answer of lowest entropy; replayed answers without a
               verdict (RLEP's re-scored pool) are verified too
    advantage  group-relative advantages over each group's members (G + M for RLEP); AsymRE's r - V
    replay     `replay.mix`: the strategy stores what it keeps and returns the batch (FIFO: drawn from its
               buffer; prioritized: fresh + drawn by |advantage|)
    train      PPO-clip (or AsymRE) updates on the torch policy, one per mini-batch, against log-probs fixed
               before the first
    sync       the new weights are loaded into the engine in place

With several training ranks in `mode: sync` every rank generates a share of the step's prompts with an engine of
its own, each prompt from a seed of its own, and loads the new weights into it after the update (colocated:
tasks/training/generation/colocated.py, docs/distributed.md). `mode: async` moves generation into its own process, which
samples the next step's answers while this one trains, within `max_staleness` policy versions
(tasks/training/generation/async_gen.py, docs/async.md); the rest of the step is the same code in both modes.

How it departs from the papers it implements (all explicit settings): the default model is a tiny
character-level model and the batch is small (32 prompts x 8 answers, not 512 x 16); there is no
dynamic sampling (DAPO), so groups with equal rewards simply contribute no gradient and are counted in
`zero_std_group_frac` (`zero_std_group_frac_fresh` before replay; `--replay refill` replaces them with stored
groups); replayed answers are re-scored, and their log-probs recomputed by the current policy (RLEP's
choice), unless `loss.is_correction=truncate`. Each replay design's own departures are in its class
docstring (tasks/replay/strategies.py, tasks/replay/self_replay.py).

Run: `rlep train --steps 40`, `rlep train --replay rlep --pool runs/collect`, `rlep train --resume runs/train`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlep.data.fs import append_rows, write_parquet_atomic, write_text_atomic
from rlep.data.problem import Problem, render_prompt
from rlep.data.prompting import chat_tokenizer
from rlep.data.rollout import Group, Rollout
from rlep.data.run_layout import TrainRunLayout
from rlep.data.sources import load_problems
from rlep.data.trajectory import to_table
from rlep.tasks.engines import GenerationEngine, make_engine
from rlep.tasks.engines.vllm_engine import engine_for_weights
from rlep.tasks.evaluate import evaluate_with_engine
from rlep.tasks.models import resolve_model
from rlep.tasks.progress import progress_bar
from rlep.tasks.replay import make_replay, pinned
from rlep.tasks.run_lock import TRAIN_LOCK_FILE, release_lock, take_lock
from rlep.tasks.settings.engine import SamplingConfig
from rlep.tasks.settings.train import TrainConfig
from rlep.tasks.training.backends.backend import make_backend
from rlep.tasks.training.backends.checkpoint import (
    CheckpointError,
    latest_checkpoint,
    load_trainer_state,
    rewind_run,
    save_checkpoint,
)
from rlep.tasks.training.backends.policy import PolicySpec
from rlep.tasks.training.backends.precision import record_precision
from rlep.tasks.training.backends.rng import seed_process
from rlep.tasks.training.generation.async_gen import Arrival, CoreShare, GeneratorProcess, RolloutFeed
from rlep.tasks.training.generation.colocated import ColocatedEngines
from rlep.tasks.training.generation.generator_pool import GeneratorPool, start_generator
from rlep.tasks.training.loop.prompts import PromptSampler, fitting
from rlep.tasks.training.loop.step_metrics import PhaseTimer, step_row
from rlep.tasks.training.maths.advantages import fill_advantages
from rlep.tasks.training.maths.batch import build_batch, group_ids
from rlep.tasks.training.maths.scoring import score_rollouts
from rlep.tasks.training.maths.update import UpdateSettings


@dataclass
class TrainResult:
    out: Path
    steps: int
    final_checkpoint: Path
    metrics_path: Path
    eval_path: Path


class Trainer:
    """Holds the policy, its optimizer, the engine and the replay strategy of one run."""

    def __init__(self, config: TrainConfig, resume: bool = False, progress: bool = True) -> None:
        from transformers import AutoTokenizer

        config = config.model_copy(update={"replay": pinned(config.replay)})  # resume replays the same pool version
        self.config = config
        self.out = Path(config.out)
        self.layout = TrainRunLayout(self.out)
        self.run_id = config.resolved_run_id()
        self.progress = progress
        seed_process(config.seed)

        checkpoint = latest_checkpoint(self.out) if resume else None
        if resume and checkpoint is None:
            raise CheckpointError(f"--resume {self.out}: no complete checkpoint under {self.layout.checkpoints}")
        sources = [load_problems(source) for source in (config.problems, config.eval_problems)]  # before a build
        self.base_model = resolve_model(config.model, progress=progress)
        weights = str(checkpoint) if checkpoint else self.base_model

        self.tokenizer = AutoTokenizer.from_pretrained(weights)
        self.chat = chat_tokenizer(self.tokenizer, config.chat_template)  # None: plain prompt_template text
        self.problems, self.eval_problems = (
            fitting(problems, config, self.tokenizer, self.chat, self.base_model) for problems in sources
        )
        self.by_key: dict[tuple[str, str], Problem] = {(p.data_source, p.id): p for p in self.problems}
        self.backend = make_backend(
            PolicySpec.of_run(config, weights, self.base_model)
        )  # policy, optimizer, KL reference
        self.update_settings = UpdateSettings.of_run(config)
        self.replay = make_replay(
            config.replay,
            seed=config.seed,
            problems={(p.data_source, p.id): p for p in self.problems},
            policy=self._mean_entropies,
        )
        self.sampler = PromptSampler(self.problems, seed=config.seed, per_step=config.prompts_per_step)
        self.torch_generator = torch.Generator().manual_seed(config.seed)
        self.step = 0
        self.tokens_generated_total = 0
        self.totals = {"optimizer_updates": 0, "tokens_trained": 0, "seconds": 0.0}  # cumulative cost of the run
        state = load_trainer_state(checkpoint) if checkpoint else {}
        if checkpoint:
            self._restore(state)
        self._prepare_out_dir()
        self.torch_threads = torch.get_num_threads()
        self.engine = self._start_engine(weights)
        self.feed = RolloutFeed(
            self.engine,
            config.mode,
            config.max_staleness,
            config.steps,
            lambda: self.sampler.next(config.prompts_per_step),
            self._sampling,
            config.prompt_template,
            version=self.step,
            chat=self.chat,
        )
        if "feed" in state:
            self.feed.load_state_dict(state["feed"])
        self._last_step_end: float | None = None

    def _start_engine(self, weights: str) -> GenerationEngine | GeneratorProcess | GeneratorPool:
        """In-process engine (sync; on several ranks one per rank, dealt the step's prompts: ColocatedEngines), or
        the generator process on its own cores, sharing the rest (async, CoreShare)."""
        engine = engine_for_weights(self.config.engine, self.base_model, weights)
        if self.config.mode == "sync" and self.config.per_prompt_seeds:
            return ColocatedEngines(weights, engine, self.backend.world_size)
        if self.config.mode == "sync":
            return make_engine(weights, engine)
        self.cores = CoreShare()
        config = self.config
        return start_generator(
            weights, engine, self.step, config.engine_count, self.cores.generator_cores, config.generator_gpus
        )

    # ------------------------------------------------------------------ the step

    def train_step(self, step: int) -> dict[str, Any]:
        """One training step; returns its metrics row."""
        config, timer, start = self.config, PhaseTimer(), time.perf_counter()
        with timer("generate"):
            arrival = self.feed.take(step, self.replay.plan if config.mode == "sync" else None)  # ExGRPO's prompts
            fresh = self._groups(arrival)
        with timer("verify"):
            score_rollouts([r for g in fresh for r in g.rollouts], config)
        with timer("replay"):
            groups = self.replay.join(fresh, step)  # sees the fresh verdicts (reuse: all wrong; refill: flat)
            self._tokenize_missing([r for g in groups for r in g.rollouts])
        with timer("verify"):
            score_rollouts([r for g in groups for r in g.rollouts if r.reward is None], config)
        with timer("advantage"):
            zero_std_frac = fill_advantages(groups, config.loss)
        with timer("replay"):
            rollouts = self.replay.mix(groups, step)
        with timer("train"):
            batch = build_batch(
                rollouts,
                self.tokenizer.pad_token_id,
                step,
                group_ids(groups, rollouts, config.replay.batch_from_buffer),
            )
            train_metrics = self.backend.update(
                batch,
                self.update_settings,
                generator=self.torch_generator,
                before_micro_batch=self._share_cores if config.mode == "async" else None,
            )
        with timer("sync"):
            self.feed.publish(step, self.backend.named_weights(self.engine.weight_dtype))  # streamed, engine's dtype
        self.step = step
        self._write_rows(fresh, rollouts, step)
        return self._metrics_row(step, fresh, groups, rollouts, zero_std_frac, train_metrics, timer, arrival, start)

    def _mean_entropies(self, prompt: list[int], answers: list[list[int]]) -> list[float]:
        """Each answer's mean token entropy under the current policy (ExGRPO's choice among stored answers), asked
        of the backend (ExGRPO runs sync in one process: TrainConfig refuses it on several ranks)."""
        config = self.config
        pad = self.tokenizer.pad_token_id
        return self.backend.mean_entropies(prompt, answers, pad, config.sampling.temperature, config.micro_batch_size)

    def _share_cores(self) -> None:
        self.cores.adjust(generator_busy=self.engine.busy())

    def _sampling(self, step: int) -> SamplingConfig:
        config = self.config
        return SamplingConfig(
            **config.sampling.model_dump(), n=config.samples_per_prompt, seed=config.sampling_seed(step)
        )

    def _groups(self, arrival: Arrival) -> list[Group]:
        """The step's fresh answers as groups, each rollout with the policy version that generated it."""
        groups, sampling = [], arrival.sampling
        for problem, group in zip(arrival.problems, arrival.completions):
            prompt = render_prompt(problem, self.config.prompt_template, self.chat)
            rollouts = [
                Rollout(
                    problem_id=problem.id,
                    data_source=problem.data_source,
                    prompt=prompt,
                    gold_answer=problem.answer,
                    response=c.text,
                    response_token_ids=list(c.token_ids),
                    policy_version=arrival.version,
                    prompt_token_ids=list(c.prompt_token_ids) or self._encode(prompt),
                    behaviour_logprobs=list(c.logprobs),
                    finish_reason=c.finish_reason,
                    sample_index=i,
                    sampling=sampling.model_dump(include={"n", "temperature", "top_p", "max_tokens", "seed"})
                    | {"n": len(group)},  # G, or G - 1 for a prompt ExGRPO replays
                )
                for i, c in enumerate(group)
            ]
            self.tokens_generated_total += sum(len(r.response_token_ids) for r in rollouts)
            groups.append(Group(problem.id, rollouts))
        return groups

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False).input_ids

    def _tokenize_missing(self, rollouts: list[Rollout]) -> None:
        """Imported pool answers carry text only: give them token ids (whether or not they are re-scored), so
        they train on their tokens and not on none while their reward enters the group statistics."""
        for r in rollouts:
            if not r.response_token_ids:
                r.response_token_ids = self._encode(r.response) + [self.tokenizer.eos_token_id]
                r.behaviour_logprobs = None

    # ------------------------------------------------------------------ outputs

    def _metrics_row(self, step, fresh, groups, rollouts, zero_std_frac, train_metrics, timer, arrival, start):
        row = step_row(step, fresh, groups, rollouts, zero_std_frac, train_metrics, timer, arrival, self.replay)
        row.update(lr=self.backend.lr(), tokens_generated_total=self.tokens_generated_total)
        row.update(getattr(self.engine, "step_metrics", dict)())  # colocated: the ranks' shares of the generation
        now = time.perf_counter()  # wall time between the ends of consecutive steps (evaluation and saves excluded)
        row["time_step"], self._last_step_end = now - (self._last_step_end or start), now
        for name, column in (("optimizer_updates",) * 2, ("tokens_trained",) * 2, ("seconds", "time_step")):
            self.totals[name] += row[column]
            row[f"{name}_total"] = self.totals[name]
        append_rows(self.layout.metrics, [row])
        return row

    def _write_rows(self, fresh: list[Group], trained: list[Rollout], step: int) -> None:
        """OUT/fresh/part-N.parquet: every answer sampled at step N (origin fresh) and every earlier answer the
        step trained on (origin replay), so the run's data says exactly what it trained on."""
        rollouts = [r for g in fresh for r in g.rollouts] + [r for r in trained if r.origin == "replay"]
        rows = [
            r.to_row(self.by_key[(r.data_source, r.problem_id)], run_id=self.run_id, model=self.base_model)
            for r in rollouts
        ]
        write_parquet_atomic(self.layout.fresh_part(step), to_table(rows))

    def evaluate(self, step: int) -> list[dict[str, Any]]:
        """Held-out evaluation with the live engine; rows appended to OUT/eval.parquet."""
        k = self.config.eval_samples
        sampling = SamplingConfig(
            n=k, temperature=0.0 if k == 1 else 1.0, max_tokens=self.config.sampling.max_tokens, seed=self.config.seed
        )
        result = evaluate_with_engine(
            self.engine,
            self.eval_problems,
            sampling,
            self.config.verifier,
            self.config.prompt_template,
            step=step,
            chat=self.chat,
        )
        append_rows(self.layout.eval, result.rows)
        return result.rows

    def save(self, step: int) -> Path:
        state = {
            "step": step,
            "tokens_generated_total": self.tokens_generated_total,
            "totals": dict(self.totals),
            **self.backend.training_state(),  # optimizer and scheduler
            "replay": self.replay.state_dict(),
            "sampler": self.sampler.state_dict(),
            "feed": self.feed.state_dict(),
            "rng": {**self.backend.rng_state(), "torch_generator": self.torch_generator.get_state()},
        }
        return save_checkpoint(
            self.out,
            step,
            self.backend,
            self.tokenizer,
            state,
            keep=self.config.keep_checkpoints,
            weight_dtype=self.engine.weight_dtype,  # a distributed run's HF export: what a resumed engine loads
        )

    def _restore(self, state: dict[str, Any]) -> None:
        self.step = state["step"]
        self.tokens_generated_total = state["tokens_generated_total"]
        self.totals.update(state.get("totals", {}))
        self.backend.load_training_state(state)
        self.replay.load_state_dict(state["replay"])
        self.sampler.load_state_dict(state["sampler"])
        self.backend.load_rng_state(state["rng"])
        self.torch_generator.set_state(state["rng"]["torch_generator"])

    def _prepare_out_dir(self) -> None:
        """Fresh run: write the config and the precision it trains in. Resume: the same, and drop everything written
        after the checkpoint's step."""
        self.out.mkdir(parents=True, exist_ok=True)
        take_lock(self.out, TRAIN_LOCK_FILE, "trained into")  # one trainer per run directory, before any write
        write_text_atomic(self.layout.config, self.config.model_dump_json(indent=2))
        record_precision(self.out, self.backend.precision, self.step)  # beside the settings: they keep `auto`
        rewind_run(self.out, self.step)

    def close(self) -> None:
        self.feed.close()
        self.backend.close()
        torch.set_num_threads(self.torch_threads)
        release_lock(self.out, TRAIN_LOCK_FILE)

    # ------------------------------------------------------------------ the run

    def run(self, on_step: Callable[[dict, list[dict] | None], None] | None = None) -> TrainResult:
        """Train from the current step to `config.steps`, evaluating and saving on schedule."""
        config = self.config
        if self.step == 0 and config.eval_every:
            rows = self.evaluate(0)
            if on_step:
                on_step({"step": 0}, rows)
        checkpoint, accuracy = None, "n/a"
        with progress_bar(self.progress, "train", config.steps, self.step) as advance:
            for step in range(self.step + 1, config.steps + 1):
                row = self.train_step(step)
                last, eval_rows, outside = step == config.steps, None, time.perf_counter()
                if last or (config.eval_every and step % config.eval_every == 0):
                    eval_rows = self.evaluate(step)
                if last or (config.save_every and step % config.save_every == 0):
                    checkpoint = self.save(step)
                if on_step:
                    on_step(row, eval_rows)
                self._last_step_end += time.perf_counter() - outside  # evaluation and checkpoints are not step time
                if eval_rows:
                    accuracy = f"{next(r for r in eval_rows if r['data_source'] == 'all')['avg_at_k']:.3f}"
                advance(f"reward {row['reward_mean']:.3f}  held-out {accuracy}  {row['time_step']:.1f}s/step")
        checkpoint = checkpoint or latest_checkpoint(self.out)
        return TrainResult(self.out, config.steps, checkpoint, self.layout.metrics, self.layout.eval)


def train_in_process(
    config: TrainConfig,
    resume: bool = False,
    progress: bool = True,
    on_step: Callable[[dict, list[dict] | None], None] | None = None,
) -> TrainResult:
    """A whole run in this process (one process, or rank 0 of a distributed run): train (or resume) to
    `config.steps`, reporting every step (tracker, log line, `on_step`), then draw OUT/learning_curve.png."""
    from rlep.tasks.plots import plot_learning_curves
    from rlep.tasks.training.loop.tracking import step_report

    try:
        trainer = Trainer(config, resume=resume, progress=progress)
        try:  # every run writes its tracker (`tracker`) and a log line per step, whoever started it
            with step_report(config, then=on_step) as report:
                result = trainer.run(report)
        finally:
            trainer.close()
    finally:  # the run directory's lock, even when the trainer failed to start after taking it
        release_lock(config.out, TRAIN_LOCK_FILE)
    plot_learning_curves({config.replay.kind: result.out}, TrainRunLayout(result.out).learning_curve)
    return result
