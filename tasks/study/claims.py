"""A study's claims, fixed when it starts: written to OUT/claims.json with their digest before the first run, and
refused if they change once a run exists.

The claims are what the report tests (`stats.evaluate_claims`), so a claim chosen after the curves are seen
would turn a descriptive figure into a confirmatory one. `fix_claims` makes "claims fixed before the run" a
check rather than a convention: before any run has written anything the record follows the configuration;
once one has, the same claims go on and different ones are refused, naming what changed. A study whose runs
existed before it kept a record (one started before this check) is recorded with `fixed_after_runs`, and its
report says so at the top of the claims section.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from rlep.data.fs import write_text_atomic
from rlep.data.run_layout import StudyLayout
from rlep.tasks.plan import Run
from rlep.tasks.study.config import StudyConfig, StudyError


@dataclass(frozen=True)
class ClaimsRecord:
    """The claims as fixed (each with `against` resolved to an arm), their digest, when, and whether runs
    already existed then."""

    claims: list[dict]
    digest: str
    recorded_at: str
    fixed_after_runs: bool

    @classmethod
    def read(cls, out: Path | str) -> ClaimsRecord | None:
        path = StudyLayout(out).claims
        return cls(**json.loads(path.read_text())) if path.is_file() else None


def claims_of(config: StudyConfig) -> tuple[list[dict], str]:
    """The configuration's claims in their recorded form (the `against` default resolved, so a changed
    baseline_arm changes them) and their digest (sha256 of the canonical JSON)."""
    claims = [
        claim.model_dump(mode="json") | {"against": claim.against or config.baseline_arm} for claim in config.claims
    ]
    digest = hashlib.sha256(json.dumps(claims, sort_keys=True).encode()).hexdigest()
    return claims, digest


def _started(runs: list[Run]) -> list[str]:
    """The runs of the plan that have written anything."""
    return [run.key for run in runs if Path(run.config.out).is_dir() and any(Path(run.config.out).iterdir())]


def _changes(old: list[dict], new: list[dict]) -> str:
    before, after = {c["name"]: c for c in old}, {c["name"]: c for c in new}
    parts = [f"removed {name}" for name in before if name not in after]
    parts += [f"added {name}" for name in after if name not in before]
    for name in before.keys() & after.keys():
        parts += [
            f"{name}: {field} {before[name].get(field)} -> {after[name].get(field)}"
            for field in sorted(before[name].keys() | after[name].keys())
            if before[name].get(field) != after[name].get(field)
        ]
    return "; ".join(sorted(parts))


def fix_claims(config: StudyConfig, runs: list[Run]) -> ClaimsRecord:
    """Record the claims in OUT/claims.json as the study starts (before its first run); returns the record.

    Raises StudyError when runs of the study already exist and the claims differ from the recorded ones."""
    claims, digest = claims_of(config)
    recorded = ClaimsRecord.read(config.out)
    if recorded is not None and recorded.digest == digest:
        return recorded
    started = _started(runs)
    if recorded is not None and started:
        raise StudyError(
            f"claims changed after runs exist ({len(started)}, e.g. {started[0]}): "
            f"{_changes(recorded.claims, claims)}. "
            f"The claims recorded at {recorded.recorded_at} ({StudyLayout(config.out).claims}, digest "
            f"{recorded.digest[:12]}) are the ones this study tests; put them back, or start a new study (another "
            "`out`) for new claims"
        )
    record = ClaimsRecord(
        claims=claims,
        digest=digest,
        recorded_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        fixed_after_runs=bool(started),
    )
    write_text_atomic(StudyLayout(config.out).claims, json.dumps(asdict(record), indent=2) + "\n")
    return record


def provenance_markdown(config: StudyConfig) -> str:
    """One line for the report: when the claims were fixed and with which digest, or loudly, why they cannot be
    taken as fixed before the runs."""
    _, digest = claims_of(config)
    recorded = ClaimsRecord.read(config.out)
    if recorded is None:
        return (
            "**WARNING: no record of the claims (claims.json)**: they were not fixed when the study started, so "
            "nothing shows they were chosen before the runs.\n"
        )
    if recorded.digest != digest:
        return (
            f"**WARNING: these claims differ from the ones recorded at {recorded.recorded_at}** (digest "
            f"{recorded.digest[:12]}, now {digest[:12]}: {_changes(recorded.claims, claims_of(config)[0])}); the "
            "recorded ones are the study's.\n"
        )
    if recorded.fixed_after_runs:
        return (
            f"**WARNING: the claims were recorded at {recorded.recorded_at}, after runs of the study existed** "
            f"(digest {digest[:12]}): nothing shows they were chosen before the runs.\n"
        )
    return f"Claims fixed at {recorded.recorded_at}, before any run (claims.json, digest {digest[:12]}).\n"
