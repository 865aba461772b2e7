"""Learning-curve figures (matplotlib, headless): held-out accuracy and training reward against step."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from rlep.data.fs import atomic_path
from rlep.data.metrics import ALL_SOURCES
from rlep.data.run_layout import TrainRunLayout


def plot_learning_curves(runs: dict[str, Path], out: Path, title: str = "Held-out accuracy") -> Path:
    """One PNG with, per run (label -> run directory), held-out avg@K (all sources) and training reward.

    Runs without held-out evaluations are skipped; the file is written atomically.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_eval, ax_reward) = plt.subplots(1, 2, figsize=(11, 4))
    for label, run in runs.items():
        layout = TrainRunLayout(run)
        if layout.eval.exists():
            ev = pq.read_table(layout.eval).to_pandas()
            ev = ev[ev.data_source == ALL_SOURCES].sort_values("step")
            k = int(ev.k.iloc[0]) if len(ev) else 1
            ax_eval.plot(ev.step, ev.avg_at_k, marker="o", label=f"{label} (avg@{k})")
        if layout.metrics.exists():
            m = pq.read_table(layout.metrics).to_pandas().sort_values("step")
            ax_reward.plot(m.step, m.reward_mean, label=label, alpha=0.8)
    ax_eval.set(title=title, xlabel="step", ylabel="accuracy")
    ax_reward.set(title="Training reward (fresh rollouts)", xlabel="step", ylabel="mean reward")
    for ax in (ax_eval, ax_reward):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    out = Path(out)
    with atomic_path(out, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
    return out
