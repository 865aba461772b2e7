"""The pipeline's report: what was collected, how each arm learned, where the time went (markdown + PNG)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from rlep.data.metrics import ALL_SOURCES
from rlep.data.run_layout import CollectRunLayout, EvalRunLayout, PipelineLayout, TrainRunLayout
from rlep.tasks.plots import plot_learning_curves

PHASE_COLUMNS = ["time_generate", "time_verify", "time_replay", "time_advantage", "time_train", "time_sync"]


def _table(df: pd.DataFrame, floats: str = "{:.3f}") -> str:
    header = "| " + " | ".join(df.columns) + " |\n|" + "---|" * len(df.columns) + "\n"
    rows = [
        "| " + " | ".join(floats.format(v) if isinstance(v, float) else str(v) for v in row) + " |"
        for row in df.itertuples(index=False)
    ]
    return header + "\n".join(rows) + "\n"


def arm_summary(run_dir: Path) -> dict:
    """Start/final held-out accuracy, mean step time split and replay share of one training run."""
    layout = TrainRunLayout(run_dir)
    ev = pd.read_parquet(layout.eval)
    overall = ev[ev.data_source == ALL_SOURCES].sort_values("step")
    metrics = pd.read_parquet(layout.metrics).sort_values("step")
    phases = {c.removeprefix("time_"): float(metrics[c].mean()) for c in PHASE_COLUMNS if c in metrics}
    return {
        "steps": int(metrics.step.max()),
        "k": int(overall.k.iloc[-1]),
        "accuracy_start": float(overall.avg_at_k.iloc[0]),
        "accuracy_final": float(overall.avg_at_k.iloc[-1]),
        "accuracy_best": float(overall.avg_at_k.max()),
        "step_seconds": float(metrics.time_step.mean()),
        "step_seconds_median": float(metrics.time_step.median()),
        "sequences_per_step": float(metrics.batch_size.mean()),
        "phase_seconds": phases,
        "replay_share": float(metrics.replay_share.mean()),
        "train_reward_first": float(metrics.reward_mean.iloc[:5].mean()),
        "train_reward_last": float(metrics.reward_mean.iloc[-5:].mean()),
        "logprob_mismatch": float(metrics.logprob_mismatch.mean()) if "logprob_mismatch" in metrics else None,
        # RLEP's effective M: pooled answers that joined a group, per group; and the share of prompts that got any
        "replay_per_group": float(metrics.replay_per_group_mean.mean()) if "replay_per_group_mean" in metrics else None,
        "replay_prompt_share": float(metrics.replay_prompt_share.mean()) if "replay_prompt_share" in metrics else None,
    }


def replay_overhead(replay_arm: dict, baseline: dict) -> dict[str, float]:
    """What a replay arm costs over the baseline (two `arm_summary` dicts), as ratios.

    `step_time` counts everything, including training on the extra replayed sequences, which is the
    method, not overhead; `per_sequence` divides that out (step time per trained sequence), so it measures
    the replay machinery plus noise; `replay_phase_share` is the replay phase's own share of a step.
    """
    per_seq = [s["step_seconds"] / s["sequences_per_step"] for s in (replay_arm, baseline)]
    return {
        "step_time": replay_arm["step_seconds"] / baseline["step_seconds"],
        "step_time_median": replay_arm["step_seconds_median"] / baseline["step_seconds_median"],
        "per_sequence": per_seq[0] / per_seq[1],
        "sequences": replay_arm["sequences_per_step"] / baseline["sequences_per_step"],
        "replay_phase_share": replay_arm["phase_seconds"].get("replay", 0.0) / replay_arm["step_seconds"],
    }


def write_report(
    out: Path,
    arms: dict[str, Path],
    evaluations: dict[str, Path],
    collect_dir: Path | None = None,
    pool_source: dict | None = None,
) -> Path:
    """Write OUT/report.md, OUT/report.json and OUT/heldout_accuracy.png; returns the markdown path.

    `pool_source` names the exploration run and checkpoint the pool was sampled from (RLEP's order).
    """
    layout = PipelineLayout(out)
    layout.root.mkdir(parents=True, exist_ok=True)
    png = plot_learning_curves(arms, layout.heldout_plot, title="Held-out accuracy vs step")
    summaries = {name: arm_summary(Path(d)) for name, d in arms.items()}
    lines = ["# rlep pipeline report", ""]
    collection = CollectRunLayout(collect_dir) if collect_dir is not None else None
    if collection is not None and collection.manifest.exists():
        manifest = json.loads(collection.manifest.read_text())
        counts, timings = manifest["counts"], manifest.get("timings", {})
        lines += [
            "## Phase I: collection",
            "",
            f"- {counts['problems']} problems x {manifest['parameters']['samples_per_prompt']} samples = "
            f"{counts['samples']} answers, "
            f"{counts['correct']} verified correct ({counts['correct'] / max(counts['samples'], 1):.1%})",
            f"- experience pool: {counts['pool_rows']} answers for {counts['pool_problems']} problems "
            f"(min_correct = {manifest['parameters']['min_correct']}), `{collection.pool}`",
            "- seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()),
            "",
        ]
        lines += _pool_source_lines(manifest, pool_source)
    rlep = summaries.get("rlep")
    if rlep is not None and rlep.get("replay_per_group") is not None:
        lines += [
            f"Effective M of the `rlep` arm: {rlep['replay_per_group']:.2f} pooled answers per group on average "
            f"(configured M is the most a group can get); {rlep['replay_prompt_share']:.1%} of prompts got any replay.",
            "",
        ]
    lines += ["## Phase II: training (held-out accuracy during training)", ""]
    table = pd.DataFrame(
        [
            {
                "arm": name,
                "steps": s["steps"],
                f"start avg@{s['k']}": s["accuracy_start"],
                "final": s["accuracy_final"],
                "best": s["accuracy_best"],
                "train reward first 5": s["train_reward_first"],
                "last 5": s["train_reward_last"],
                "replay share": s["replay_share"],
                "s/step": s["step_seconds"],
            }
            for name, s in summaries.items()
        ]
    )
    lines += [_table(table), f"![held-out accuracy]({png.name})", ""]
    lines += ["## Held-out evaluation: the starting model (`base`) and each arm's last checkpoint", ""]
    for name, eval_dir in evaluations.items():
        ev = pd.read_parquet(EvalRunLayout(Path(eval_dir)).eval)[
            ["data_source", "n_problems", "avg_at_k", "pass_at_k", "maj_at_k", "k"]
        ]
        lines += [f"### {name}", "", _table(ev)]
    lines += ["## Time per step (seconds, mean)", ""]
    phases = pd.DataFrame(
        [{"arm": name, **{k: v for k, v in s["phase_seconds"].items()}} for name, s in summaries.items()]
    )
    lines += [_table(phases)]
    if "baseline" in summaries and len(summaries) > 1:
        other = next(n for n in summaries if n != "baseline")
        overhead = replay_overhead(summaries[other], summaries["baseline"])
        lines += [
            f"Replay overhead, measured inside the `{other}` run: its replay phase takes "
            f"{overhead['replay_phase_share']:.2%} of a step. Its whole steps took x{overhead['step_time']:.3f} the "
            f"baseline's (median x{overhead['step_time_median']:.3f}), training x{overhead['sequences']:.3f} as many "
            "sequences, but the two runs ran at different times, so that ratio also carries whatever else the machine "
            "was doing and is not an overhead measurement.",
            "",
        ]
    layout.report_json.write_text(json.dumps(summaries, indent=2))
    layout.report.write_text("\n".join(lines))
    return layout.report


def _pool_source_lines(manifest: dict, pool_source: dict | None) -> list[str]:
    """Which policy the pool was sampled from, and how good it was on the held-out evaluation."""
    if pool_source is None:
        return [f"- sampled from `{manifest.get('model', {}).get('path', manifest.get('model'))}`", ""]
    ev = pd.read_parquet(EvalRunLayout(Path(pool_source["eval"])).eval)
    overall = ev[ev.data_source == ALL_SOURCES].iloc[0]
    return [
        f"- sampled from `{pool_source['checkpoint']}`, the last checkpoint of the exploration run "
        f"(`{pool_source['run']}`: plain GRPO from the start, as RLEP collects from an RL-improved policy); its "
        f"held-out "
        f"avg@{int(overall.k)} {overall.avg_at_k:.3f}, pass@{int(overall.k)} {overall.pass_at_k:.3f}",
        "",
    ]
