"""Whether what a run's directory holds can be reused: decided by comparing versioned digests of resolved settings
(`tasks.settings.digest`), never by the device, except for one question of runs saved before `precision: auto`.

A finished run's record holds its starting weights' hash and the digest of its resolved settings (training or
evaluation, the evaluation of its last checkpoint, a living pool's re-collection period and settings) with the
digest's version. A record of another version, or of none (written before digests were versioned), cannot tell:
the settings the run saved beside its checkpoints are read in today's layout and compared instead, which keeps its
checkpoints when the training is the same (its evaluation, which such a record does not describe, is done again).
`verdict` is the one decision the executor asks for: reuse, evaluate again, start over, or go on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rlep.data.run_layout import CollectRunLayout, EvalRunLayout, TrainRunLayout
from rlep.tasks.plan import Run
from rlep.tasks.settings.collect import CollectConfig
from rlep.tasks.settings.digest import digest_record, same_digest, same_settings
from rlep.tasks.settings.train import TrainConfig

# A killed run may resume under other steps (a living-pool arm trains in segments) and another pool version (a
# run pins its store's version when it starts).
RESUMABLE_ASIDE = {"steps": True, "replay": {"pool"}}


def settings_parts(run: Run) -> tuple[Any, ...]:
    """What a finished run's digest covers: its settings, its evaluation's and its pool's life."""
    living = run.living
    return run.config, run.evaluate, living.every if living else None, living.collect if living else None


def identity(run: Run, hashes: dict[str, str | None] | None = None) -> dict:
    """What a run's record must hold for the run to count as finished: its starting weights and settings digest.
    `hashes` (model -> hash), when given, keeps the hashes already taken (several runs start from one model)."""
    return {"start_weights": _start_weights(run.config.model, hashes), **digest_record(*settings_parts(run))}


def record(run: Run) -> dict | None:
    """The record a finished run wrote last (None: not finished)."""
    done = EvalRunLayout(run.config.out).record
    return json.loads(done.read_text()) if done.is_file() else None


def finished(run: Run, found: dict, hashes: dict[str, str | None] | None = None) -> bool:
    """`found` (the run's record) is of this run: the same starting weights and the digest of the same settings.
    `hashes`: as `identity`'s (a caller that took the identity passes the same, so the weights are read once)."""
    return found.get("start_weights") == _start_weights(run.config.model, hashes) and bool(
        same_digest(found, *settings_parts(run))
    )


def finished_record(run: Run, hashes: dict[str, str | None] | None = None, earlier_digest: bool = False) -> dict | None:
    """The record of `run` if it finished with its settings from its starting weights (so it would not run again),
    else None. `earlier_digest`: a record of an earlier digest counts too when it holds the same training (what
    `verdict` would only evaluate again), as a study's interim report reads a run finished before an upgrade.
    (A collection has no record: its manifest says it finished.)"""
    found = record(run)
    if found is None:
        return None
    hashes = {} if hashes is None else hashes  # the starting weights read once, by both questions
    if finished(run, found, hashes):
        return found
    return found if earlier_digest and _trained_already(run, found, _start_weights(run.config.model, hashes)) else None


def _trained_already(run: Run, found: dict, start_weights: str | None) -> bool:
    """`found`, a record of another digest, ends a training of `run`'s: its final checkpoint, from the same
    starting weights, with the same training settings."""
    return bool(found.get("final_checkpoint")) and found.get("start_weights") == start_weights and trained_alike(run)


@dataclass(frozen=True)
class Verdict:
    """What to do with what a run's directory holds: `reuse` its finished `record`; `evaluate-again` its `final`
    checkpoint (the same training, its record of an earlier digest); `start-over` (`why` says why); or `go-on`
    (nothing there, or a killed run of the same settings to resume). `identity` is what its record must hold."""

    action: Literal["reuse", "evaluate-again", "start-over", "go-on"]
    identity: dict
    record: dict | None = None
    final: str | None = None
    why: str = ""


def verdict(run: Run, evaluate_again: bool = False) -> Verdict:
    """The one decision about `run`'s directory, its starting weights read once. `evaluate_again`: the caller can
    evaluate a finished training again (a whole training run; not a living-pool arm's first part)."""
    hashes: dict[str, str | None] = {}
    mine, found, out = identity(run, hashes), record(run), run.config.out
    if found is not None and finished(run, found, hashes):
        return Verdict("reuse", mine, record=found)
    if found is not None:
        if evaluate_again and _trained_already(run, found, mine["start_weights"]):
            why = f"{run.key}: {out} finished with the same training settings; evaluating it again"
            return Verdict("evaluate-again", mine, final=found["final_checkpoint"], why=why)
        why = f"{run.key}: {out} finished with other settings or starting weights; running it again"
        return Verdict("start-over", mine, why=why)
    if run.kind == "train" and not same_training(out, run.config):
        return Verdict("start-over", mine, why=f"{run.key}: {out} holds a run with other settings; starting it over")
    return Verdict("go-on", mine)


def trained_alike(run: Run) -> bool:
    """`run` is a training run whose directory holds the same training settings, steps included (a layout change
    of the settings does not count), and which has no living pool to re-check."""
    if run.kind != "train" or run.living is not None:
        return False
    saved = TrainRunLayout(run.config.out).config
    return saved.is_file() and same_settings(
        TrainConfig, saved.read_text(), run.config, auto_precision=lambda: auto_precision_here(run.config)
    )


def same_training(out: Path | str, config: TrainConfig) -> bool:
    """A killed run in `out` may be resumed: no settings there yet, or the same ones (`RESUMABLE_ASIDE` aside)."""
    saved = TrainRunLayout(out).config
    if not saved.is_file():
        return True
    return same_settings(
        TrainConfig,
        saved.read_text(),
        config,
        exclude=RESUMABLE_ASIDE,
        auto_precision=lambda: auto_precision_here(config),
    )


def collected_alike(out: CollectRunLayout, config: CollectConfig) -> bool:
    """The finished collection in `out` has `config`'s settings (a layout change of the settings does not count)."""
    saved = json.loads(out.manifest.read_text()).get("parameters")
    return isinstance(saved, dict) and same_settings(CollectConfig, saved, config)


def auto_precision_here(config: TrainConfig) -> str:
    """What `precision: auto` picks for `config`'s update on this machine: asked only of a run saved before `auto`
    existed, whose settings name a concrete precision (the one place reuse looks at the device)."""
    import torch

    from rlep.tasks.training.backends.precision import resolve_precision
    from rlep.tasks.training.generation.async_gen import update_device

    return resolve_precision("auto", update_device(config.generator_gpus, torch.cuda.device_count())).precision


def _start_weights(model: str, hashes: dict[str, str | None] | None = None) -> str | None:
    """The hash of the starting weights when `model` is a local directory (a study resolves `tiny` to one), kept in
    `hashes` (model -> hash) when given."""
    from rlep.data.fs import weights_hash

    hashes = {} if hashes is None else hashes
    if model not in hashes:
        hashes[model] = weights_hash(model) if Path(model).is_dir() else None
    return hashes[model]
