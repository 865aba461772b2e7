"""Every registered replay design runs from the command line at its own defaults (issue 45: `rlep train --replay fifo`
was refused, its default batch of fresh / (1 - replay_ratio) rollouts not splitting into whole mini-batches)."""

import json

import pyarrow.parquet as pq
import pytest
from conftest import judged_row, write_rows

from rlep.data.sources import load_problems
from rlep.flows.cli import main
from rlep.tasks.replay.strategies import DESIGNS
from rlep.tasks.settings.train import TrainConfig

# The cheapest run through the CLI: one step of 4 prompts x 2 answers of at most 4 tokens on the transformers engine,
# 2 held-out problems once. One prompt per mini-batch, so FIFO's default batch (8 / 0.75 = 10.7 rollouts) must be
# rounded to whole mini-batches of 2 rollouts, as its 341 rollouts to mini-batches of 64 at the full defaults.
FAST = (
    "--no-prefect --steps 1 --prompts-per-step 4 --samples-per-prompt 2 --mini-batch-prompts 1 --max-tokens 4 "
    "--problems-limit 4 --eval-problems-limit 2 --eval-samples 1 --eval-every 0 --engine transformers"
).split()


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """Verified answers to the run's training problems, for the designs that replay a pool (RLEP)."""
    problems = load_problems(TrainConfig().problems.model_copy(update={"limit": 4}))  # as --problems-limit 4
    rows = [judged_row(p, f"\\boxed{{{p.answer}}}") for p in problems]
    return write_rows(tmp_path_factory.mktemp("pool") / "pool.parquet", rows)


@pytest.mark.parametrize("kind", sorted(DESIGNS))
def test_every_design_trains_a_step_at_its_defaults(fixture_model, pool, tmp_path, kind):
    out = tmp_path / kind
    needs_pool = ["--pool", str(pool)] if DESIGNS[kind].needs.pool else []
    assert main(["train", "--model", fixture_model, "--replay", kind, *needs_pool, *FAST, "--out", str(out)]) == 0
    assert pq.read_table(out / "metrics.parquet").column("step").to_pylist()[-1] == 1
    replay = json.loads((out / "train_config.json").read_text())["replay"]
    assert replay["kind"] == kind
    if kind == "fifo":  # replay_ratio 0.25's batch, rounded to whole mini-batches and recorded
        assert (replay["replay_ratio"], replay["batch_size"]) == (0.25, 10)
