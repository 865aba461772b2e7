"""Whether each run of a study kept improving: its held-out accuracy at the last evaluation against its best, and its
policy entropy step by step (each run's metrics.parquet), as a table and a plot in the study's report.

A baseline that falls back after its best step (GRPO's entropy collapsing on a small problem set) makes any change
that moves a run off its path look like an improvement; a pilot reads this section to choose a regime where the
baseline is still improving or level at its last step (docs/study.md).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from rlep.data.fs import atomic_path
from rlep.data.metrics import ALL_SOURCES
from rlep.data.run_layout import StudyLayout, TrainRunLayout

CURVE_COLUMNS = ["arm", "seed", "step", "entropy", "reward_mean"]


def run_curves(root: Path | str, arms: list[str], seeds: list[int]) -> pd.DataFrame:
    """Per training step of every (arm, seed) run under the study `root` that has metrics: its policy entropy and
    mean reward (a run not started yet has no rows)."""
    frames = []
    layout = StudyLayout(root)
    for arm in arms:
        for seed in seeds:
            metrics = TrainRunLayout(layout.run(arm, seed)).metrics
            if metrics.is_file():
                table = pd.read_parquet(metrics, columns=["step", "entropy", "reward_mean"])
                frames.append(table.assign(arm=arm, seed=seed))
    if not frames:
        return pd.DataFrame(columns=CURVE_COLUMNS)
    return pd.concat(frames, ignore_index=True)[CURVE_COLUMNS].sort_values(["arm", "seed", "step"], ignore_index=True)


def stability(study: pd.DataFrame, curves: pd.DataFrame) -> pd.DataFrame:
    """One row per (arm, seed): the best held-out accuracy and its step, the accuracy at the last evaluated step and
    how far below the best it is (`fallback`), and the policy entropy at the first and the last training step."""
    rows = []
    for (arm, seed), run in study.groupby(["arm", "seed"], sort=True):
        run = run.sort_values("step", ignore_index=True)
        best = run.loc[run.accuracy.idxmax()]
        last = run.iloc[-1]
        entropy = curves[(curves.arm == arm) & (curves.seed == seed)].sort_values("step").entropy
        rows.append(
            {
                "arm": arm,
                "seed": int(seed),
                "best": float(best.accuracy),
                "best_step": int(best.step),
                "last_step": int(last.step),
                "last": float(last.accuracy),
                "fallback": float(best.accuracy - last.accuracy),
                "entropy_first": float(entropy.iloc[0]) if len(entropy) else float("nan"),
                "entropy_last": float(entropy.iloc[-1]) if len(entropy) else float("nan"),
            }
        )
    return pd.DataFrame(rows)


def stability_markdown(table: pd.DataFrame, noise: float) -> str:
    """The table, and how many runs of each arm end within `noise` (the evaluation's sd) of their best."""
    lines = [
        "| arm | seed | best (step) | last (step) | below best | entropy first -> last |",
        "|---|---|---|---|---|---|",
    ]
    for row in table.itertuples(index=False):
        lines.append(
            f"| {row.arm} | {row.seed} | {row.best:.3f} ({row.best_step}) | {row.last:.3f} ({row.last_step}) | "
            f"{row.fallback:.3f} | {row.entropy_first:.3f} -> {row.entropy_last:.3f} |"
        )
    if noise != noise:  # no evaluation read: nothing to compare the fall-backs with
        return "\n".join(lines)
    held = table.assign(held=table.fallback <= noise).groupby("arm").held.agg(["sum", "count"])
    lines += [
        "",
        "Runs whose last evaluation is within the evaluation noise "
        f"({noise:.3f}) of their best: "
        + "; ".join(f"{arm} {int(row['sum'])} of {int(row['count'])}" for arm, row in held.iterrows())
        + ".",
    ]
    return "\n".join(lines)


def evaluation_noise(root: Path | str, arms: list[str], seeds: list[int]) -> float:
    """The sd of the difference between two held-out evaluations of accuracies near 0.5 (binomial, the largest it
    can be), on as many problems as the study's first evaluated run saw: sqrt(2 x 0.25 / n), 0.032 for 500."""
    layout = StudyLayout(root)
    for arm in arms:
        for seed in seeds:
            ev = TrainRunLayout(layout.run(arm, seed)).eval
            if ev.is_file():
                table = pd.read_parquet(ev, columns=["data_source", "n_problems"])
                problems = int(table[table.data_source == ALL_SOURCES].n_problems.iloc[0])
                return (2 * 0.25 / max(problems, 1)) ** 0.5
    return float("nan")


def plot_entropy(curves: pd.DataFrame, path: Path) -> Path:
    """Mean policy entropy per training step of each arm, with the seeds' range as a band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
    for arm, group in curves.groupby("arm"):
        by_step = group.groupby("step").entropy.agg(["mean", "min", "max", "count"]).reset_index()
        ax.plot(by_step.step, by_step["mean"], label=f"{arm} (n={int(by_step['count'].max())})")
        ax.fill_between(by_step.step, by_step["min"], by_step["max"], alpha=0.2)
    ax.set_xlabel("training step")
    ax.set_ylabel("policy entropy (mean over seeds; band: their range)")
    ax.grid(alpha=0.3)
    if len(curves):
        ax.legend()
    fig.tight_layout()
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp)
    plt.close(fig)
    return path
