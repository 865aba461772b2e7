"""A study's outputs: study.parquet, final.parquet, summary.parquet, claims, three plots with interval bands, report.md."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from data.fs import atomic_path, write_parquet_atomic, write_text_atomic
from tasks.study.config import StudyConfig
from tasks.study.stats import claims, summarize

PLOTS = {"step": "accuracy_vs_step.png", "tokens_generated": "accuracy_vs_tokens.png", "wall_seconds": "accuracy_vs_wall.png"}


def write_study_outputs(config: StudyConfig, study: pd.DataFrame, final: pd.DataFrame, command: str | None = None) -> dict[str, Path]:
    """Write every output file of the study under `config.out`; returns their paths by name."""
    import pyarrow as pa

    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(study, config.baseline_arm, config.bootstrap_samples)
    table = claims(study, final, config.baseline_arm, config.bootstrap_samples)
    paths = {"study": out / "study.parquet", "final": out / "final.parquet", "summary": out / "summary.parquet", "claims": out / "claims.parquet"}
    for name, frame in (("study", study), ("final", final), ("summary", summary), ("claims", table)):
        write_parquet_atomic(paths[name], pa.Table.from_pandas(frame, preserve_index=False))
    for x, name in PLOTS.items():
        paths[name] = _plot(summary, x, out / name)
    paths["report"] = out / "report.md"
    write_text_atomic(paths["report"], report_markdown(config, summary, table, command))
    return paths


def _interval(value: float, low: float, high: float, fmt: str = "{:.3f}") -> str:
    if math.isinf(value):
        return "not reached"
    text = fmt.format(value)
    if math.isnan(low):
        return text
    upper = "not reached" if math.isinf(high) else fmt.format(high)
    return f"{text} [{fmt.format(low)}, {upper}]"


def claims_markdown(table: pd.DataFrame) -> str:
    """The claims table: one row per arm, every figure with its 95% interval over seeds."""
    k = int(table.k.max()) if len(table) else 0
    lines = [
        f"| arm | seeds | steps to baseline's best | tokens to it | final accuracy | final diff vs baseline | pass@{k} at the end |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in table.itertuples(index=False):
        lines.append(
            f"| {row.arm} | {row.n_seeds} | {_interval(row.steps_to_target, row.steps_ci_low, row.steps_ci_high, '{:.0f}')} | "
            f"{_interval(row.tokens_to_target, row.tokens_ci_low, row.tokens_ci_high, '{:,.0f}')} | "
            f"{_interval(row.final_mean, row.final_ci_low, row.final_ci_high)} | "
            f"{_interval(row.final_diff, row.final_diff_ci_low, row.final_diff_ci_high, '{:+.3f}')} | "
            f"{_interval(row.pass_at_k, row.pass_ci_low, row.pass_ci_high)} |"
        )
    return "\n".join(lines) + "\n"


def report_markdown(config: StudyConfig, summary: pd.DataFrame, table: pd.DataFrame, command: str | None = None) -> str:
    target = float(table.target_accuracy.iloc[0]) if len(table) else math.nan
    lines = [
        "# rlep study",
        "",
        f"Arms {', '.join(sorted(config.arms))}; seeds {config.seeds}; reference arm `{config.baseline_arm}`. "
        f"Held-out accuracy is the training runs' evaluation (avg@k on the eval problems); the target is the "
        f"baseline's best mean accuracy over its evaluation steps ({target:.3f}). Intervals: 95% bootstrap over seeds "
        f"({config.bootstrap_samples} resamples), differences paired by seed; \"not reached\" means the mean curve "
        "(or that end of the interval) never reaches the target.",
        "",
    ]
    if command:
        lines += ["Regenerate with:", "", f"    {command}", ""]
    lines += ["## Claims", "", claims_markdown(table), ""]
    lines += ["## Held-out accuracy per evaluation step (mean [95% interval]; difference to the baseline, paired)", ""]
    lines += ["| arm | step | seeds | accuracy | diff vs baseline | tokens generated | training seconds |", "|---|---|---|---|---|---|---|"]
    for row in summary.itertuples(index=False):
        lines.append(f"| {row.arm} | {row.step} | {row.n_seeds} | {_interval(row.mean, row.ci_low, row.ci_high)} | "
                     f"{_interval(row.diff_mean, row.diff_ci_low, row.diff_ci_high, '{:+.3f}')} | {row.tokens_generated:,.0f} | "
                     f"{row.wall_seconds:.1f} |")  # fmt: skip
    lines += ["", *(f"![{name}]({name})" for name in PLOTS.values()), ""]
    return "\n".join(lines)


def _plot(summary: pd.DataFrame, x: str, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = {"step": "training step", "tokens_generated": "tokens generated", "wall_seconds": "training seconds"}
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
    for arm, group in summary.groupby("arm"):
        group = group.sort_values("step")
        ax.plot(group[x], group["mean"], marker="o", markersize=3, label=f"{arm} (n={int(group.n_seeds.max())})")
        if group.ci_low.notna().any():
            ax.fill_between(group[x], group.ci_low, group.ci_high, alpha=0.2)
    ax.set_xlabel(labels[x])
    ax.set_ylabel("held-out accuracy (mean, 95% interval)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp)
    plt.close(fig)
    return path
