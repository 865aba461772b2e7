"""Phase I, collection: sample many answers per problem, verify each, store every trajectory, build the pool.

The run is split into shards of `shard_size` problems, fixed by the settings, and each shard goes
through two steps, each a plain function (and a Prefect task in `flows.collect`):

    generate_shard  engine samples `samples_per_prompt` answers per problem -> DIR/.staging/part-N.parquet
    verify_shard    verify_batch checks them, rewards them -> DIR/trajectories/part-N.parquet (atomic)

then `finalize` builds DIR/pool.parquet (verified successes of problems with >= `min_correct`, deduplicated)
and DIR/manifest.json, which also counts the rows of the source left out, per reason (`invalid_rows: skip`,
`overlong_prompts: filter`). A killed run restarted with the same settings and run id skips finished shards
(and reuses finished staging files), so nothing is generated twice and no row is written twice.

Before any of it, `preflight` (tasks/collect_preflight.py) plans the shards and makes every check a user can
fail; the settings are `CollectConfig` (tasks/settings/collect.py). Pool rule and defaults follow RLEP (arXiv
2507.07451): 64 samples per problem at temperature 0.7 there; 8 here by default so a CPU collection takes minutes.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlep.data.fs import write_parquet_atomic
from rlep.data.pool import build_pool
from rlep.data.problem import Problem, render_prompt
from rlep.data.prompting import chat_tokenizer
from rlep.data.store import ExperienceStore, StoreError, read_trajectory_files
from rlep.data.trajectory import rows_for_problem, to_table
from rlep.tasks.collect_preflight import preflight
from rlep.tasks.engines.cache import shared_engine
from rlep.tasks.progress import progress_bar
from rlep.tasks.run_lock import release_lock
from rlep.tasks.settings.collect import CollectConfig
from rlep.verifiers import rewards, verify_batch

# The collection's API: its settings and preflight (rlep collect checks before it starts the run elsewhere) are
# importable from here too.
__all__ = [
    "CollectConfig",
    "collection_cost",
    "finalize",
    "generate_shard",
    "preflight",
    "release_lock",
    "run_collection",
    "verify_shard",
]

TIMINGS_FILE = "timings.jsonl"


def _staging_path(store: ExperienceStore, shard: int) -> Path:
    return store.root / ".staging" / store.shard_path(shard).name


def _remove_empty_staging(store: ExperienceStore) -> None:
    """A finished collection leaves no `.staging/`: each shard's file there is removed once it is verified."""
    try:
        (store.root / ".staging").rmdir()
    except OSError:  # not there, or it holds a shard not verified yet (kept for a resume)
        pass


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
    sampling = config.request(shard)
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
    _remove_empty_staging(store)
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
