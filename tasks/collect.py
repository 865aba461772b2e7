"""Phase I, collection: sample many answers per problem, verify each, store every trajectory, build the pool.

The run is split into shards of `shard_size` problems, fixed by the settings, and each shard goes
through two steps, each a plain function (and a Prefect task in `flows.collect`):

    generate_shard  engine samples `samples_per_prompt` answers per problem -> DIR/.staging/part-N.parquet
    verify_shard    verify_batch checks them, rewards them -> DIR/trajectories/part-N.parquet (atomic)

then `finalize` builds DIR/pool.parquet (verified successes of problems with >= `min_correct`, deduplicated)
and DIR/manifest.json, which also counts the rows of the source left out, per reason (`invalid_rows: skip`,
`overlong_prompts: filter`). A killed run restarted with the same settings and run id skips finished shards
(and reuses finished staging files), so nothing is generated twice and no row is written twice.

Pool rule and defaults follow RLEP (arXiv 2507.07451): 64 samples per problem at temperature 0.7 there;
8 here by default so a CPU collection takes minutes.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlep.data.fs import process_alive, write_parquet_atomic, write_text_atomic
from rlep.data.pool import build_pool
from rlep.data.problem import DEFAULT_PROMPT_TEMPLATE, Problem, render_prompt
from rlep.data.prompt_length import PromptLengthConfig, fitting_problems
from rlep.data.prompting import CHAT_TEMPLATE_HELP, ChatTemplateMode, chat_tokenizer
from rlep.data.run_layout import checkpoint_step
from rlep.data.sources import ProblemSourceConfig, default_task, load_source
from rlep.data.store import ExperienceStore, StoreError, read_trajectory_files
from rlep.data.trajectory import rows_for_problem, to_table
from rlep.tasks.engines import EngineConfig, SamplingConfig, context_limit
from rlep.tasks.engines.cache import shared_engine
from rlep.tasks.models import resolve_model
from rlep.tasks.progress import progress_bar
from rlep.verifiers import RewardConfig, VerifierConfig, rewards, verify_batch

TIMINGS_FILE = "timings.jsonl"
SETTINGS_FILE = "collect_settings.json"  # what the shards on disk were sampled with
LOCK_FILE = "collect.lock"  # pid of the process collecting into the directory


class CollectConfig(BaseModel):
    """Collect verified answers into an experience pool (RLEP Phase I)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(
        "tiny",
        min_length=1,
        description="Policy to sample from: HF-format directory (e.g. a checkpoint) or name; `tiny` = the project's "
        "tiny model.",
    )
    problems: ProblemSourceConfig = Field(
        default_factory=lambda: default_task("train", limit=200), description="Problems to collect answers for."
    )
    engine: EngineConfig = Field(default_factory=EngineConfig, description="Generation engine.")
    samples_per_prompt: int = Field(8, ge=1, le=4096, description="Answers sampled per problem (RLEP: 64).")
    temperature: float = Field(0.7, gt=0, le=10, description="Sampling temperature (RLEP: 0.7).")
    top_p: float = Field(0.95, gt=0, le=1, description="Nucleus sampling mass.")
    max_tokens: int = Field(24, ge=1, le=1_048_576, description="Most new tokens per answer.")
    seed: int = Field(0, ge=0, description="Sampling seed (each shard derives its own from it).")
    min_correct: int = Field(
        2, ge=1, le=4096, description="A problem enters the pool with at least this many verified answers (RLEP: 2)."
    )
    prompt_length: PromptLengthConfig = Field(
        default_factory=PromptLengthConfig,
        description="Prompts with less than max_tokens of room in the engine's max_model_len.",
    )
    dedupe: bool = Field(
        False,
        description="Keep each distinct verified answer once per problem; off (RLEP's pool) keeps every verified "
        "answer, repeats included, so M replayed answers are drawn from all of them.",
    )
    shard_size: int = Field(
        64, ge=1, le=1_000_000, description="Problems per shard (the unit of progress and of resume)."
    )
    out: Path = Field(Path("runs/collect"), description="Run directory (trajectories/, pool.parquet, manifest.json).")
    run_id: str | None = Field(None, description="Run id stored in every row; default: the out directory's name.")
    policy_version: int | None = Field(
        None,
        ge=0,
        description="Training step of the model's weights; default: N for a `step-N` checkpoint directory, else 0.",
    )
    prompt_template: str = Field(DEFAULT_PROMPT_TEMPLATE, description="Prompt with a `{problem}` placeholder.")
    chat_template: ChatTemplateMode = Field("auto", description=CHAT_TEMPLATE_HELP)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig, description="Answer checking.")
    reward: RewardConfig = Field(default_factory=RewardConfig, description="Reward from verdicts (stored per row).")

    @model_validator(mode="after")
    def _check(self) -> CollectConfig:
        if self.min_correct > self.samples_per_prompt:
            raise ValueError(
                f"min_correct ({self.min_correct}) > samples_per_prompt ({self.samples_per_prompt}): no problem could "
                f"enter the pool"
            )
        if "{problem}" not in self.prompt_template:
            raise ValueError("prompt_template must contain the `{problem}` placeholder")
        return self

    def resolved_run_id(self) -> str:
        return self.run_id or Path(self.out).resolve().name

    def resolved_policy_version(self) -> int:
        if self.policy_version is not None:
            return self.policy_version
        step = checkpoint_step(self.model)
        return 0 if step is None else step

    def sampling(self, shard: int) -> SamplingConfig:
        return SamplingConfig(
            n=self.samples_per_prompt,
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=self.max_tokens,
            seed=self.seed * 1_000_003 + shard,
        )


OVERLONG = "prompt too long"  # the reason counted for a problem left out by `overlong_prompts: filter`


@dataclass(frozen=True)
class CollectPlan:
    """The problems of each shard, and the rows of the source left out of them, per reason."""

    shards: list[list[Problem]]
    # reason -> count: rows without a usable problem or answer (invalid_rows: skip; counted over the rows read,
    # before `limit`) and problems whose prompt leaves no room for max_tokens (overlong_prompts: filter)
    left_out: dict[str, int] = field(default_factory=dict)


def plan_shards(config: CollectConfig, model: str) -> CollectPlan:
    """The problems of each shard, a pure function of the settings and the model's tokenizer (so a restart sees
    the same shards): prompts too long for the engine's context are refused, or left out and counted."""
    from transformers import AutoTokenizer

    loaded = load_source(config.problems)
    chat = chat_tokenizer(model, config.chat_template)  # `on` for a model without a chat template fails here
    prompts = [render_prompt(p, config.prompt_template, chat) for p in loaded.problems]
    problems = fitting_problems(
        loaded.problems,
        prompts,
        chat or AutoTokenizer.from_pretrained(str(model)),
        max_model_len=config.engine.max_model_len,
        max_new_tokens=config.max_tokens,
        overlong=config.prompt_length.overlong_prompts,
        model_limit=context_limit(model, config.engine),
    )
    left_out = dict(loaded.skipped)
    if len(problems) < len(loaded.problems):
        left_out[OVERLONG] = len(loaded.problems) - len(problems)
    shards = [problems[i : i + config.shard_size] for i in range(0, len(problems), config.shard_size)]
    return CollectPlan(shards, left_out)


def preflight(config: CollectConfig) -> tuple[ExperienceStore, CollectPlan, str]:
    """Every check a user can fail, before any work: problems readable and fitting the context, output
    writable, model present, and a directory with finished shards holds the same collection (else its shards
    would be reused)."""
    model = resolve_model(config.model)  # before the directory is made: a missing model leaves nothing behind
    plan = plan_shards(config, model)
    store = ExperienceStore(config.out, run_id=config.resolved_run_id()).prepare()
    take_lock(store.root)
    try:
        _check_same_collection(config, model, store)
        _check_parts(store)
    except BaseException:
        release_lock(store.root)
        raise
    return store, plan, model


def _check_parts(store: ExperienceStore) -> None:
    """A finished part that does not open (cut short by a full disk or a copy) is named, not skipped as done."""
    for path in store.shard_paths():
        try:
            pq.read_metadata(path)
        except (OSError, pa.ArrowInvalid) as err:
            raise StoreError(
                f"{path}: unreadable Parquet part ({err}); delete it and run the same command again to collect that "
                f"shard anew"
            ) from None


def take_lock(root: Path) -> Path:
    """Claim DIR for this process: DIR/collect.lock holds its pid. Another live process's lock refuses
    (two collections into one directory would write the same shards); a dead process's lock is taken over."""
    path = Path(root) / LOCK_FILE
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                holder = int(path.read_text(encoding="utf-8").strip() or 0)
            except (OSError, ValueError):
                holder = 0  # unreadable or cut short: its writer died mid-write
            if holder == os.getpid():
                return path
            if holder and process_alive(holder):
                raise StoreError(
                    f"{root} is being collected into by process {holder} (lock {path}); wait for it to finish, "
                    "or use another --out"
                ) from None
            path.unlink(missing_ok=True)  # stale: its process is gone
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(str(os.getpid()))
        return path


def release_lock(root: Path) -> None:
    """Drop DIR/collect.lock if this process holds it."""
    path = Path(root) / LOCK_FILE
    try:
        if int(path.read_text(encoding="utf-8").strip()) == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass


def _content_settings(config: CollectConfig, model: str) -> dict[str, Any]:
    """The settings that decide what the shards contain (not where they go or how the pool is cut)."""
    settings = config.model_dump(mode="json", exclude={"out", "min_correct", "dedupe"})
    return {
        **settings,
        "model": str(Path(model).resolve()) if Path(model).exists() else model,
        "run_id": config.resolved_run_id(),
        "policy_version": config.resolved_policy_version(),
    }


def _check_same_collection(config: CollectConfig, model: str, store: ExperienceStore) -> None:
    path = store.root / SETTINGS_FILE
    settings = _content_settings(config, model)
    if store.completed_shards() or any((store.root / ".staging").glob("*.parquet")):
        saved = json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
        if saved != settings:
            changed = sorted(k for k in settings if saved.get(k) != settings[k]) if saved else ["(no record)"]
            raise StoreError(
                f"{store.root} holds shards of a different collection (changed: {', '.join(changed)}); "
                "resuming would mix them. Use a new --out, or delete the directory to start over."
            )
        return
    write_text_atomic(path, json.dumps(settings, indent=2, sort_keys=True))


def _staging_path(store: ExperienceStore, shard: int) -> Path:
    return store.root / ".staging" / store.shard_path(shard).name


def _log_timing(store: ExperienceStore, shard: int, phase: str, seconds: float, **extra: Any) -> None:
    with open(store.root / TIMINGS_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps({"shard": shard, "phase": phase, "seconds": seconds, "pid": os.getpid(), **extra}) + "\n")


def generate_shard(config: CollectConfig, model: str, shard: int, problems: list[Problem]) -> Path:
    """Sample answers for one shard; writes them (not yet verified) to a staging file and returns its path."""
    store = ExperienceStore(config.out, run_id=config.resolved_run_id())
    staging = _staging_path(store, shard)
    if staging.exists():  # generated before a kill: verified next, not sampled again
        return staging
    start = time.perf_counter()
    chat = chat_tokenizer(model, config.chat_template)
    prompts = [render_prompt(p, config.prompt_template, chat) for p in problems]
    sampling = config.sampling(shard)
    completions = shared_engine(model, config.engine).generate(prompts, sampling)
    unverified = _Unverified()
    rows = []
    for problem, prompt, group in zip(problems, prompts, completions):
        rows += rows_for_problem(
            problem,
            prompt,
            group,
            [unverified] * len(group),
            [0.0] * len(group),
            run_id=store.run_id,
            policy_version=config.resolved_policy_version(),
            model=config.model,
            sampling=sampling.model_dump(),
        )
    with _writing(staging):
        write_parquet_atomic(staging, to_table(rows))
    tokens = sum(len(c.token_ids) for group in completions for c in group)
    import torch  # loaded with the engine already

    _log_timing(
        store,
        shard,
        "generate",
        time.perf_counter() - start,
        tokens=tokens,
        problems=len(problems),
        threads=torch.get_num_threads(),
    )
    return staging


@contextmanager
def _writing(path: Path) -> Iterator[None]:
    """A failed write (full disk, no permission) as a StoreError naming the file; the atomic writers
    have already removed their temporary file, so a rerun resumes from the shards that are complete."""
    try:
        yield
    except OSError as err:
        raise StoreError(
            f"{path}: not written ({err.strerror or err}); nothing partial was kept, "
            "free space or fix permissions and run the same command again to resume"
        ) from None


class _Unverified:
    """Verdict placeholder of a staging row."""

    correct, extracted, reason, seconds = False, None, "unverified", 0.0


def verify_shard(config: CollectConfig, shard: int, staging: Path) -> Path:
    """Verify and reward a staged shard; writes DIR/trajectories/part-N.parquet atomically, returns its path."""
    store = ExperienceStore(config.out, run_id=config.resolved_run_id())
    start = time.perf_counter()
    table = read_trajectory_files([staging])
    verdicts = verify_batch(table["response"].to_pylist(), table["gold_answer"].to_pylist(), config=config.verifier)
    verified_at = time.perf_counter()
    values = rewards(verdicts, config.reward)
    rows = table.to_pylist()
    for row, verdict, value in zip(rows, verdicts, values):
        row.update(
            correct=verdict.correct,
            extracted_answer=verdict.extracted,
            verdict_reason=verdict.reason,
            reward=value,
            verify_seconds=verdict.seconds,
        )
    with _writing(store.shard_path(shard)):
        path = store.write_shard(shard, rows)
    staging.unlink(missing_ok=True)
    _log_timing(store, shard, "verify", verified_at - start)
    _log_timing(store, shard, "write", time.perf_counter() - verified_at)
    return path


def finalize(
    config: CollectConfig,
    model: str,
    started: float,
    engine_start: float = 0.0,
    left_out: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Build the pool and write the manifest; returns the pool statistics, timing totals and the rows left out
    (`engine_start`: seconds spent starting the engine in this invocation, kept apart from `generate`;
    `left_out`: the plan's rows of the source left out, per reason, recorded in the manifest)."""
    store = ExperienceStore(config.out, run_id=config.resolved_run_id())
    start = time.perf_counter()
    stats = build_pool(store, config.min_correct, config.dedupe)
    timings = {"engine_start": engine_start, **_timing_totals(store)}
    timings["pool"] = time.perf_counter() - start
    # A resumed run: this invocation's wall time, but never less than the work on disk it stands for.
    timings["total"] = max(time.perf_counter() - started, sum(timings.values()))
    store.write_manifest(
        parameters=config.model_dump(mode="json"),
        model=config.model,
        model_dir=model if Path(model).is_dir() else None,
        timings=timings,
        pool_stats=stats.to_dict(),
        left_out=left_out or {},
    )
    return {"pool": stats.to_dict(), "timings": timings, "run_dir": str(store.root), "left_out": left_out or {}}


def _timing_totals(store: ExperienceStore) -> dict[str, float]:
    """Seconds per phase over the shards on disk (a shard redone after a kill counts its last attempt)."""
    totals: dict[str, float] = {"generate": 0.0, "verify": 0.0, "write": 0.0}
    for (_, phase), entry in _latest_timings(store).items():
        totals[phase] += entry["seconds"]
    return totals


def collection_cost(run_dir: Path | str) -> dict[str, float]:
    """What a finished collection cost: `tokens_generated` (sampled tokens over its shards) and `seconds` (its
    manifest's total wall time), so a run that replays its pool can be charged for it."""
    store = ExperienceStore(run_dir)
    tokens = sum(e.get("tokens", 0) for (_, phase), e in _latest_timings(store).items() if phase == "generate")
    manifest = json.loads(store.manifest_path.read_text(encoding="utf-8"))
    return {"tokens_generated": float(tokens), "seconds": float(manifest.get("timings", {}).get("total", 0.0))}


def _latest_timings(store: ExperienceStore) -> dict[tuple[int, str], dict]:
    """The last timing entry of each (shard, phase) of the completed shards."""
    done = set(store.completed_shards())
    latest: dict[tuple[int, str], dict] = {}
    path = store.root / TIMINGS_FILE
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:  # a line cut by a kill
                continue
            if entry["shard"] in done:
                latest[(entry["shard"], entry["phase"])] = entry
    return latest


def run_collection(
    config: CollectConfig,
    generate: Callable = generate_shard,
    verify: Callable = verify_shard,
    finish: Callable = finalize,
    on_shard: Callable[[int, int], None] | None = None,
    progress: bool = True,
    run_shards: Callable[[CollectConfig, str, list[tuple[int, list[Problem]]]], None] | None = None,
) -> dict[str, Any]:
    """The whole collection. `generate` / `verify` / `finish` default to the plain functions above;
    `flows.collect` passes their Prefect task wrappers, so there is one loop for both.

    `run_shards(config, model, [(shard, problems), ...])`, when given, does the shards that are not done
    elsewhere (flows.collect: in parallel on Ray workers, one engine each) and returns when all are written;
    then no engine starts here and the manifest's engine start is 0 (each worker's is inside its shard time)."""
    started = time.perf_counter()
    store, plan, model = preflight(config)
    shards = plan.shards
    try:
        done = set(store.completed_shards())
        todo = [i for i in range(len(shards)) if i not in done]
        if run_shards is not None:
            run_shards(config, model, [(i, shards[i]) for i in todo])
            return {
                **finish(config, model, started, 0.0, plan.left_out),
                "shards": len(shards),
                "skipped_shards": len(done),
            }
        engine_start = time.perf_counter()
        if todo:  # started here so that shard timings measure sampling, not start-up
            shared_engine(model, config.engine)
        engine_start = time.perf_counter() - engine_start
        with progress_bar(progress, "collect shards", len(shards), len(done)) as advance:
            for index in todo:
                staging = generate(config, model, index, shards[index])
                verify(config, index, staging)
                advance()
                if on_shard:
                    on_shard(len(shards) - len(todo) + todo.index(index) + 1, len(shards))
        return {
            **finish(config, model, started, engine_start, plan.left_out),
            "shards": len(shards),
            "skipped_shards": len(done),
        }
    finally:
        release_lock(store.root)
