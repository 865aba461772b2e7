"""A study's record, fixed when it starts: the whole plan and the code version, written to OUT/claims.json with
their digest before the first run, and refused if they change once a run exists.

The claims are what the report tests (`stats.evaluate_claims`), so a claim chosen after the curves are seen
would turn a descriptive figure into a confirmatory one; and the claims mean what they say only for the plan they
were fixed with: the seeds, every arm's resolved settings (steps included), the evaluation set, the run graph and
the code that ran it. `fix_record` makes "fixed before the run" a check rather than a convention: before any run
has written anything the record follows the configuration; once one has, the same plan goes on and a different
one is refused in one line naming what changed, unless the configuration carries an amendment of the recorded
digest (`StudyConfig.amendments`), which is applied once, kept in the record and printed by the report. A report
(`--report-only`) runs nothing, so there a changed code version is stated, not refused.

A study whose runs existed before it kept a record (one started before this check) is recorded with
`fixed_after_runs`, and its report says so. A record of the earlier, claims-only form (no `version`) still loads:
it is read as the record of the claims alone (their digest checked as before) and the report says that the rest
of the plan was not recorded; while no run exists it is replaced by a whole record.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rlep.data.fs import write_text_atomic
from rlep.data.run_layout import StudyLayout
from rlep.tasks.plan import Run
from rlep.tasks.settings.study import StudyConfig
from rlep.tasks.settings.train import TrainConfig
from rlep.tasks.study.plan import StudyError

VERSION = 2
_PER_RUN = ("seed", "out")  # set by the plan for each run: not an arm's setting


@dataclass(frozen=True)
class StudyRecord:
    """The plan as fixed (`plan`: seeds, arms' resolved settings, evaluation, collection, run keys, claims with
    `against` resolved), the code version (`code`: git commit and whether the tree was dirty), their digest, when,
    whether runs already existed then, and the amendments made since (each: when, the digest it amended, the new
    digest, the reason, what changed). `plan` and `code` are None for a claims-only record of the earlier form."""

    claims: list[dict]
    digest: str
    recorded_at: str
    fixed_after_runs: bool
    plan: dict | None = None
    code: dict | None = None
    amendments: list[dict] = field(default_factory=list)

    @property
    def claims_only(self) -> bool:
        return self.plan is None

    @classmethod
    def read(cls, out: Path | str) -> StudyRecord | None:
        path = StudyLayout(out).claims
        if not path.is_file():
            return None
        saved = json.loads(path.read_text())
        if "version" not in saved:  # the earlier form: {claims, digest, recorded_at, fixed_after_runs}
            return cls(**saved)
        return cls(
            claims=saved["plan"]["claims"],
            digest=saved["digest"],
            recorded_at=saved["recorded_at"],
            fixed_after_runs=saved["fixed_after_runs"],
            plan=saved["plan"],
            code=saved["code"],
            amendments=saved.get("amendments", []),
        )

    def write(self, out: Path | str) -> None:
        saved = {"version": VERSION, **{k: v for k, v in asdict(self).items() if k != "claims"}}
        write_text_atomic(StudyLayout(out).claims, json.dumps(saved, indent=2) + "\n")


def claims_of(config: StudyConfig) -> tuple[list[dict], str]:
    """The configuration's claims in their recorded form (the `against` default resolved, so a changed
    baseline_arm changes them) and their digest (sha256 of the canonical JSON: the earlier record's digest)."""
    claims = [
        claim.model_dump(mode="json") | {"against": claim.against or config.baseline_arm} for claim in config.claims
    ]
    return claims, _sha256(claims)


def plan_of(config: StudyConfig, runs: list[Run]) -> dict:
    """The plan as recorded: seeds, the baseline, every arm's resolved training settings (the base merged with its
    overrides, as `plan` validates them; without the per-run seed and out), the final evaluation's settings, the
    collection's (RLEP's pools), the exploration's steps, the run keys in order, and the claims."""
    arms = {}
    for arm in config.arms:
        settings = TrainConfig.model_validate(config.arm_settings(arm)).model_dump(mode="json")
        arms[arm] = {name: value for name, value in settings.items() if name not in _PER_RUN}
    collect = config.collect.model_dump(mode="json")
    return {
        "seeds": list(config.seeds),
        "baseline_arm": config.baseline_arm,
        "arms": arms,
        "evaluation": config.evaluate.model_dump(mode="json"),
        "collect": {name: value for name, value in collect.items() if name not in (*_PER_RUN, "model")},
        "explore_steps": config.explore_steps,
        "equal_updates": config.equal_updates,
        "runs": [run.key for run in runs],
        "claims": claims_of(config)[0],
    }


def code_version() -> dict[str, Any]:
    """The git commit of the code running and whether its working tree differs from it (tracked files); None for
    each when the code is not in a git work tree (an installed copy)."""
    root = Path(__file__).resolve().parents[2]

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def code_text(code: dict | None) -> str:
    if not code or not code.get("commit"):
        return "unknown (not a git work tree)"
    return code["commit"][:12] + (" (dirty)" if code.get("dirty") else " (clean)")


def _sha256(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def _started(runs: list[Run]) -> list[str]:
    """The runs of the plan that have written anything."""
    return [run.key for run in runs if Path(run.config.out).is_dir() and any(Path(run.config.out).iterdir())]


def _claim_changes(old: list[dict], new: list[dict]) -> list[str]:
    before, after = {c["name"]: c for c in old}, {c["name"]: c for c in new}
    parts = [f"removed {name}" for name in before if name not in after]
    parts += [f"added {name}" for name in after if name not in before]
    for name in before.keys() & after.keys():
        parts += [
            f"{name}: {field} {before[name].get(field)} -> {after[name].get(field)}"
            for field in sorted(before[name].keys() | after[name].keys())
            if before[name].get(field) != after[name].get(field)
        ]
    return sorted(parts)


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        return {k: v for key in value for k, v in _flat(value[key], f"{prefix}.{key}" if prefix else key).items()}
    return {prefix: value}


def _short(value: Any, width: int = 60) -> str:
    text = json.dumps(value) if isinstance(value, (dict, list)) else str(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def plan_changes(old: dict, new: dict) -> list[str]:
    """What differs between two recorded plans, one short item each: claims by name, run keys added or removed,
    every other setting by its dotted path (`arms.rlep.optimizer.lr 1e-05 -> 2e-05`)."""
    parts = [f"claims: {c}" for c in _claim_changes(old.get("claims", []), new.get("claims", []))]
    before, after = old.get("runs", []), new.get("runs", [])
    parts += [f"runs: removed {key}" for key in before if key not in after]
    parts += [f"runs: added {key}" for key in after if key not in before]
    rest_old = _flat({k: v for k, v in old.items() if k not in ("claims", "runs")})
    rest_new = _flat({k: v for k, v in new.items() if k not in ("claims", "runs")})
    for path in sorted(rest_old.keys() | rest_new.keys()):
        if rest_old.get(path, "(absent)") != rest_new.get(path, "(absent)"):
            parts.append(f"{path} {_short(rest_old.get(path, '(absent)'))} -> {_short(rest_new.get(path, '(absent)'))}")
    return parts


def _summary(parts: list[str], most: int = 8) -> str:
    return "; ".join(parts[:most]) + (f"; and {len(parts) - most} more" if len(parts) > most else "")


def fix_record(config: StudyConfig, runs: list[Run], running: bool = True, code: dict | None = None) -> StudyRecord:
    """Record the plan and the code version in OUT/claims.json as the study starts (before its first run); returns
    the record. `running`: runs are about to execute under this code (False for a report, which runs nothing: a
    changed code version is then not a change of the study). `code`: the code version (default: this checkout's).

    Raises StudyError, in one line naming what changed, when runs of the study already exist and the plan (or, when
    running, the code version) differs from the recorded one, unless `config.amendments` amends the recorded
    digest: the change is then recorded with the amendment's reason."""
    code = code_version() if code is None else code
    plan = plan_of(config, runs)
    digest = _sha256({"plan": plan, "code": code})
    recorded = StudyRecord.read(config.out)
    started = _started(runs)
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    fresh = StudyRecord(plan["claims"], digest, now, bool(started), plan, code)
    if recorded is None or (not started and recorded.digest != digest):
        fresh.write(config.out)  # nothing ran yet (or runs predate any record): the plan may still change
        return fresh
    if recorded.claims_only:  # the earlier form: only the claims can be checked
        changes = _claim_changes(recorded.claims, plan["claims"])
        if changes:
            raise _refused(config, recorded, started, [f"claims: {c}" for c in changes], claims_only=True)
        return recorded
    if recorded.digest == digest:
        return recorded
    changes = plan_changes(recorded.plan, plan)
    if recorded.code != code:
        if not running and not changes:
            return recorded  # a report of the same plan under other code: stated in the report, not refused
        changes.append(f"code {code_text(recorded.code)} -> {code_text(code)}")
    amendment = next((a for a in config.amendments if recorded.digest.startswith(a.of)), None)
    if amendment is None:
        raise _refused(config, recorded, started, changes)
    note = {"at": now, "of": recorded.digest, "digest": digest, "reason": amendment.reason, "changes": changes}
    amended = replace(
        recorded, claims=plan["claims"], digest=digest, plan=plan, code=code, amendments=[*recorded.amendments, note]
    )
    amended.write(config.out)
    return amended


def _refused(
    config: StudyConfig, recorded: StudyRecord, started: list[str], changes: list[str], claims_only: bool = False
) -> StudyError:
    what = "claims" if claims_only else "study plan"
    fix = (
        "put them back, or start a new study (another `out`)"
        if claims_only
        else f"put it back, amend it (`amendments: [{{of: {recorded.digest[:12]}, reason: ...}}]` in the "
        "configuration; the report prints it), or start a new study (another `out`)"
    )
    return StudyError(
        f"{what} changed after runs exist ({len(started)}, e.g. {started[0]}): {_summary(changes)}. The record of "
        f"{recorded.recorded_at} ({StudyLayout(config.out).claims}, digest {recorded.digest[:12]}) is the one this "
        f"study tests; {fix}"
    )


def provenance_markdown(config: StudyConfig) -> str:
    """Lines for the report: what was fixed when, with which digest and code version, every amendment, or loudly,
    why the claims cannot be taken as fixed before the runs."""
    claims, claims_digest = claims_of(config)
    recorded = StudyRecord.read(config.out)
    if recorded is None:
        return (
            "**WARNING: no record of the study (claims.json)**: its claims and plan were not fixed when it started, "
            "so nothing shows they were chosen before the runs.\n"
        )
    if recorded.claims_only:
        lines = [
            "claims.json is a claims-only record (its earlier form): the seeds, the arms' settings, the evaluation "
            "set and the code version the study ran with were not recorded, so nothing shows they did not change."
        ]
        if recorded.digest != claims_digest:
            lines.append(
                f"**WARNING: these claims differ from the ones recorded at {recorded.recorded_at}** (digest "
                f"{recorded.digest[:12]}, now {claims_digest[:12]}: {_summary(_claim_changes(recorded.claims, claims))}"
                "); the recorded ones are the study's."
            )
        elif recorded.fixed_after_runs:
            lines.append(f"**WARNING: the claims were recorded at {recorded.recorded_at}, after runs existed.**")
        else:
            lines.append(f"Claims fixed at {recorded.recorded_at}, before any run (digest {recorded.digest[:12]}).")
        return "\n\n".join(lines) + "\n"
    from rlep.tasks.study.plan import plan

    lines = []
    changes = plan_changes(recorded.plan, plan_of(config, plan(config)))
    if changes:
        lines.append(
            f"**WARNING: this configuration differs from the plan recorded at {recorded.recorded_at}** (digest "
            f"{recorded.digest[:12]}: {_summary(changes)}); the recorded one is the study's."
        )
    if recorded.fixed_after_runs:
        lines.append(
            f"**WARNING: the plan was recorded at {recorded.recorded_at}, after runs of the study existed** (digest "
            f"{recorded.digest[:12]}): nothing shows it was chosen before the runs."
        )
    else:
        lines.append(
            f"Plan fixed at {recorded.recorded_at}, before any run (claims.json, digest {recorded.digest[:12]}): "
            f"seeds, steps, every arm's resolved settings, the evaluation set and the claims, under code "
            f"{code_text(recorded.code)}."
        )
    now = code_version()
    if now != recorded.code:
        lines.append(f"This report was written under code {code_text(now)}.")
    for note in recorded.amendments:
        lines.append(
            f"**Amended at {note['at']}** (digest {note['of'][:12]} -> {note['digest'][:12]}): {note['reason']}. "
            f"Changed: {_summary(note['changes'])}."
        )
    return "\n\n".join(lines) + "\n"
