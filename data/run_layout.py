"""Where a run keeps its files: one class per run kind owns the names, everything else asks it.

A training run directory (`rlep train --out OUT`):

    OUT/train_config.json        the run's settings
    OUT/metrics.parquet          one row per step (data.metrics columns)
    OUT/eval.parquet             held-out evaluation rows, appended every `eval_every` steps
    OUT/fresh/part-NNNNN.parquet every answer sampled at step N and every replayed answer it trained on
    OUT/checkpoints/step-N/      HF weights + tokenizer + trainer state (complete or absent); under torch.distributed
                                 also sharded/, each rank's shards of weights and optimizer
    OUT/learning_curve.png       held-out accuracy and training reward against step
    OUT/tensorboard/, mlflow.db  the same metrics for a tracker, with `tracker` tensorboard or mlflow

An evaluation run directory (`rlep eval --out OUT`): `eval.parquet` (one summary row per data source and
the `all` row) and `eval_samples.parquet` (every answer with its verdict).

A collection run directory (`rlep collect --out DIR`, data.store.ExperienceStore):

    DIR/trajectories/part-NNNNN.parquet   one file per shard, all rows of the trajectory schema
    DIR/pool.parquet                      the experience pool (data.pool)
    DIR/manifest.json                     parameters, model + weights hash, versions, counts, checksums

A pool store ROOT (data.pool.PoolStore) holds versions ROOT/vNNNN/: pool.parquet and lineage.json.

A pipeline directory (`rlep pipeline --out OUT`): OUT/collect/ (a collection run), OUT/explore/ and
OUT/<arm>/ (training runs), OUT/eval/<name>/ (evaluation runs), OUT/report.md, report.json and
heldout_accuracy.png.

A study directory (`rlep study`, OUT): OUT/runs/<arm>/seed-N/, OUT/explore/seed-N/ (training runs),
OUT/collect/seed-N/ (collection runs), OUT/claims.json (the claims fixed when it started), and the study's tables,
plots and report.md (tasks.study.report).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_STEP_DIR = re.compile(r"^step-(\d+)$")
# A pool file has this name wherever it lives: a collection run, a pool version, an imported pool's directory.
POOL_FILE = "pool.parquet"


def checkpoint_step(path: str | Path) -> int | None:
    """N for a directory named `step-N` (a training checkpoint), else None."""
    match = _STEP_DIR.match(Path(path).name)
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class EvalRunLayout:
    """Files of an evaluation run."""

    root: Path

    @property
    def eval(self) -> Path:
        return self.root / "eval.parquet"

    @property
    def samples(self) -> Path:
        return self.root / "eval_samples.parquet"

    @property
    def record(self) -> Path:
        """Written last in a finished run's directory (an evaluation, or a training run with its evaluation)."""
        return self.root / "run_record.json"


@dataclass(frozen=True)
class TrainRunLayout:
    """Files of a training run; its periodic evaluations share the evaluation run's `eval.parquet` name."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def config(self) -> Path:
        """The run's settings (`--resume` reads them back)."""
        return self.root / "train_config.json"

    @property
    def launch_request(self) -> Path:
        """A distributed run's settings as every rank reads them (rank 0 alone writes `config`)."""
        return self.root / "launch_config.json"

    @property
    def resolved_settings(self) -> Path:
        """What the run resolved when it started (`precision: auto`'s choice, per start)."""
        return self.root / "resolved_settings.json"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.parquet"

    @property
    def eval(self) -> Path:
        return EvalRunLayout(self.root).eval

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    def checkpoint(self, step: int) -> Path:
        return self.checkpoints / f"step-{step}"

    def step_checkpoints(self) -> list[tuple[int, Path]]:
        """(step, directory) of every `checkpoints/step-N` directory, by step (complete or not: the caller checks)."""
        if not self.checkpoints.is_dir():
            return []
        found = [(step, p) for p in self.checkpoints.iterdir() if (step := checkpoint_step(p)) is not None]
        return sorted(found)

    @property
    def fresh(self) -> Path:
        return self.root / "fresh"

    def fresh_part(self, step: int) -> Path:
        return self.fresh / f"part-{step:05d}.parquet"

    def fresh_parts(self) -> list[tuple[int, Path]]:
        """(step, file) of every rollout part, by step."""
        return sorted((int(p.stem.removeprefix("part-")), p) for p in self.fresh.glob("part-*.parquet"))

    @property
    def final_eval(self) -> EvalRunLayout:
        """Where the study evaluates a run's last checkpoint."""
        return EvalRunLayout(self.root / "final_eval")

    @property
    def learning_curve(self) -> Path:
        return self.root / "learning_curve.png"

    @property
    def tensorboard(self) -> Path:
        """TensorBoard event files of `tracker: tensorboard` (tasks/training/loop/tracking.py)."""
        return self.root / "tensorboard"

    @property
    def mlflow(self) -> Path:
        """The MLflow store of `tracker: mlflow` (SQLite: MLflow 3 refuses new directory stores)."""
        return self.root / "mlflow.db"


@dataclass(frozen=True)
class CollectRunLayout:
    """Files of a collection run."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def trajectories(self) -> Path:
        return self.root / "trajectories"

    def shard(self, index: int) -> Path:
        """Final path of shard `index` (whether or not it exists)."""
        return self.trajectories / f"part-{index:05d}.parquet"

    @property
    def pool(self) -> Path:
        return self.root / POOL_FILE

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.json"

    @property
    def sampling_settings(self) -> Path:
        """The settings the shards on disk were sampled with (a resumed collection must match them)."""
        return self.root / "collect_settings.json"


@dataclass(frozen=True)
class PoolVersionLayout:
    """Files of one version directory of a pool store (ROOT/vNNNN/)."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def pool(self) -> Path:
        return self.root / POOL_FILE

    @property
    def lineage(self) -> Path:
        """Its parent version and every contribution so far."""
        return self.root / "lineage.json"


@dataclass(frozen=True)
class PipelineLayout:
    """Directories and report files of a pipeline (explore -> collect -> train each arm -> evaluate -> report)."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def collect(self) -> CollectRunLayout:
        return CollectRunLayout(self.root / "collect")

    @property
    def explore(self) -> Path:
        """The exploration training run, when it is not the baseline arm's run."""
        return self.root / "explore"

    def arm(self, name: str) -> Path:
        """The training run of arm `name`."""
        return self.root / name

    def evaluation(self, name: str) -> EvalRunLayout:
        """The evaluation of `name` (base, explore or an arm)."""
        return EvalRunLayout(self.root / "eval" / name)

    def living_pool(self, arm: str) -> Path:
        """The pool store of a living-pool arm."""
        return self.root / "pools" / arm

    @property
    def report(self) -> Path:
        return self.root / "report.md"

    @property
    def report_json(self) -> Path:
        return self.root / "report.json"

    @property
    def heldout_plot(self) -> Path:
        return self.root / "heldout_accuracy.png"


# x axis -> file name of the study's plots of held-out accuracy
STUDY_PLOTS = {
    "step": "accuracy_vs_step.png",
    "tokens_generated": "accuracy_vs_tokens.png",
    "tokens_charged": "accuracy_vs_charged_tokens.png",
    "wall_seconds": "accuracy_vs_wall.png",
}
ENTROPY_PLOT = "entropy_vs_step.png"  # each arm's policy entropy per training step


@dataclass(frozen=True)
class StudyLayout:
    """Run directories of a study, one per (arm or phase, seed)."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    def run(self, arm: str, seed: int) -> Path:
        """The training run of `arm` at `seed`."""
        return self.root / "runs" / arm / f"seed-{seed}"

    def explore(self, seed: int) -> Path:
        """The exploration training run of `seed`, when it is not the baseline arm's run."""
        return self.root / "explore" / f"seed-{seed}"

    def collect(self, seed: int) -> CollectRunLayout:
        return CollectRunLayout(self.root / "collect" / f"seed-{seed}")

    @property
    def claims(self) -> Path:
        """The claims as fixed when the study started, with their digest (`tasks.study.claims`)."""
        return self.root / "claims.json"

    def living_pool(self, arm: str, seed: int) -> Path:
        """The pool store of a living-pool arm at `seed` (`tasks.living_pool`): its versions and re-collections."""
        return self.root / "pools" / arm / f"seed-{seed}"

    def table(self, name: str) -> Path:
        """One of the study's tables (`study`, `final`, `summary`, `claims`, `endpoints`, `answer_check`, `stability`,
        `curves`, `control`)."""
        return self.root / f"{name}.parquet"

    def plot(self, x: str) -> Path:
        """The held-out accuracy plotted against `x` (`step`, `tokens_generated`, `tokens_charged`, `wall_seconds`)."""
        return self.root / STUDY_PLOTS[x]

    @property
    def entropy_plot(self) -> Path:
        """Each arm's policy entropy per training step (`tasks.study.curves`)."""
        return self.root / ENTROPY_PLOT

    @property
    def report(self) -> Path:
        return self.root / "report.md"

    def evaluation(self, name: str, seed: int, run_out: Path) -> Path:
        """The final evaluation of a training run: inside its directory."""
        return TrainRunLayout(run_out).final_eval.root
