"""`rlep bench sync`'s own arithmetic: the bytes a sync sends, and where the step it is a share of comes from."""

from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from rlep.tasks.bench import sync
from rlep.tasks.bench.sync import Counted, SyncBenchConfig


def test_the_bytes_of_a_sync_are_those_of_every_tensor_sent():
    stream = Counted([("a", torch.zeros(10)), ("b", torch.zeros(3, dtype=torch.bfloat16)), ("a_tied", torch.zeros(10))])
    assert [name for name, _ in stream] == ["a", "b", "a_tied"] and stream.bytes == 40 + 6 + 40


def test_the_step_comes_from_a_training_run_or_a_flag_never_both():
    assert SyncBenchConfig(model="m").train_steps == 6
    assert SyncBenchConfig(model="m", train_steps=0, step_seconds=2.5).step_seconds == 2.5
    with pytest.raises(ValidationError, match="at least 4"):
        SyncBenchConfig(model="m", train_steps=3)
    with pytest.raises(ValidationError, match="only with train_steps 0"):
        SyncBenchConfig(model="m", step_seconds=2.5)


def test_the_share_is_the_median_over_steady_steps_of_the_run(monkeypatch):
    rows = [{"step": s, "time_sync": 0.1 * s, "time_step": 2.0} for s in range(1, 8)]
    monkeypatch.setattr("rlep.tasks.bench.async_train._run", lambda config: {"rows": rows})
    share = sync.step_share("m", "async", "float32", 128, 7, out=Path("unused"))
    assert "steps [3, 4, 5, 6]" in share["source"]  # the first two and the last left out
    assert share["step_seconds"] == 2.0 and share["sync_seconds"] == pytest.approx(0.45)
    assert share["sync_share"] == pytest.approx(0.225)
