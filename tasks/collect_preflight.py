"""Before a collection does any work: its shards planned, and every check a user can fail made.

`plan_shards` fixes the problems of each shard from the settings and the model's tokenizer alone (so a restart
sees the same shards), refusing prompts too long for the engine's context or leaving them out and counting them
(`overlong_prompts`). `preflight` adds the rest: the model present, the output writable and locked
(tasks/run_lock.py), its finished parts readable, and a directory with finished shards holding the same
collection (DIR/collect_settings.json records what they were sampled with), else its shards would be reused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from rlep.data.fs import write_text_atomic
from rlep.data.problem import Problem, render_prompt
from rlep.data.prompt_length import fitting_problems
from rlep.data.prompting import chat_tokenizer
from rlep.data.sources import SourceLoad, load_source
from rlep.data.store import ExperienceStore, StoreError
from rlep.tasks.engines import context_limit
from rlep.tasks.models import resolve_model
from rlep.tasks.run_lock import release_lock, take_lock
from rlep.tasks.settings.collect import CollectConfig

OVERLONG = "prompt too long"  # the reason counted for a problem left out by `overlong_prompts: filter`


@dataclass(frozen=True)
class CollectPlan:
    """The problems of each shard, and the rows of the source left out of them, per reason."""

    shards: list[list[Problem]]
    # reason -> count: rows without a usable problem or answer (invalid_rows: skip; counted over the rows read,
    # up to the `limit`-th problem) and problems whose prompt leaves no room for max_tokens (overlong_prompts: filter)
    left_out: dict[str, int] = field(default_factory=dict)


def plan_shards(config: CollectConfig, model: str, loaded: SourceLoad | None = None) -> CollectPlan:
    """The problems of each shard, a pure function of the settings and the model's tokenizer (so a restart sees
    the same shards): prompts too long for the engine's context are refused, or left out and counted. `loaded`:
    the source already loaded from `config.problems`."""
    from transformers import AutoTokenizer

    loaded = loaded or load_source(config.problems)
    chat = chat_tokenizer(model, config.chat_template)  # `on` for a model without a chat template fails here
    prompts = [render_prompt(p, config.prompt_template, chat) for p in loaded.problems]
    problems = fitting_problems(
        loaded.problems,
        prompts,
        chat or AutoTokenizer.from_pretrained(str(model)),
        max_model_len=config.engine.max_model_len,
        max_new_tokens=config.sampling.max_tokens,
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
    would be reused). The problems are read first: a bad source, split or row fails in seconds, before the model
    is built or fetched (minutes on a machine without the cached tiny model)."""
    loaded = load_source(config.problems)
    model = resolve_model(config.model)  # before the directory is made: a missing model leaves nothing behind
    plan = plan_shards(config, model, loaded)
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
    path = store.layout.sampling_settings
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
