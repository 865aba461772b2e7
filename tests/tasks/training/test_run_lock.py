"""One trainer per run directory: a second training into a directory another live process is training into is
refused before anything is written; a dead trainer's lock is taken over, and a finished run leaves none."""

import subprocess
import sys

import pytest

from rlep.data.store import StoreError
from rlep.tasks.settings.train import TrainConfig
from rlep.tasks.training.loop.steps import train_in_process


def _config(model, out):
    return TrainConfig.model_validate(
        dict(
            model=model,
            out=str(out),
            steps=1,
            prompts_per_step=2,
            samples_per_prompt=2,
            max_tokens=8,
            eval_every=0,
            save_every=0,
            problems={"source": "tiny-math", "split": "train", "limit": 4},
            eval_problems={"source": "tiny-math", "split": "test", "limit": 2},
            engine={"backend": "transformers"},
        )
    )


def test_a_second_trainer_into_one_run_directory_is_refused_and_a_dead_ones_lock_taken_over(fixture_model, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (out / "train.lock").write_text(str(other.pid))
        with pytest.raises(StoreError, match=rf"being trained into by process {other.pid} \(lock .*train.lock\)"):
            train_in_process(_config(fixture_model, out), progress=False)
        assert sorted(p.name for p in out.iterdir()) == ["train.lock"]  # nothing written beside the live lock
    finally:
        other.kill()
        other.wait()
    result = train_in_process(_config(fixture_model, out), progress=False)  # the holder is dead: taken over
    assert result.steps == 1 and not (out / "train.lock").exists()
