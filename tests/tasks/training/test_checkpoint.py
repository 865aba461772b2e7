"""Checkpoint writes under faults: a failed write is named and leaves nothing, a kill mid-write leaves the last
complete one."""

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlep.tasks.training.backends.checkpoint import (
    CheckpointError,
    latest_checkpoint,
    list_checkpoints,
    load_trainer_state,
    save_checkpoint,
)


class _Model:
    """Writes a weights file like save_pretrained; `fail` raises mid-write, `pause` sleeps mid-write."""

    def __init__(self, fail=None, pause=0.0):
        self.fail, self.pause = fail, pause

    def save_pretrained(self, path, weight_dtype=None):
        with open(path / "model.safetensors", "wb") as f:
            f.write(b"half of the weights")
            f.flush()
            if self.pause:
                print("writing", flush=True)
                time.sleep(self.pause)
            if self.fail:
                raise OSError(self.fail, os.strerror(self.fail))
            f.write(b" and the rest")


class _Tokenizer:
    def save_pretrained(self, path):
        (path / "tokenizer.json").write_text("{}")


def _entries(out):
    return sorted(p.name for p in (out / "checkpoints").iterdir())


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EACCES])
def test_a_failed_checkpoint_write_is_named_and_leaves_nothing(tmp_path, code):
    save_checkpoint(tmp_path, 1, _Model(), _Tokenizer(), {"step": 1})
    with pytest.raises(
        CheckpointError, match=rf"step-2: checkpoint not written \({os.strerror(code)}\); nothing partial"
    ):
        save_checkpoint(tmp_path, 2, _Model(fail=code), _Tokenizer(), {"step": 2})
    assert _entries(tmp_path) == ["step-1"]
    assert load_trainer_state(latest_checkpoint(tmp_path)) == {"step": 1}
    save_checkpoint(tmp_path, 2, _Model(), _Tokenizer(), {"step": 2})  # after space is freed, the run goes on
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-1", "step-2"]


WRITER = """
import sys
sys.path[:0] = [{root!r}, {tests!r}]
from test_checkpoint import _Model, _Tokenizer
from rlep.tasks.training.backends.checkpoint import save_checkpoint
save_checkpoint({out!r}, 1, _Model(), _Tokenizer(), {{"step": 1}})
save_checkpoint({out!r}, 2, _Model(pause=60), _Tokenizer(), {{"step": 2}})
"""


def test_sigkill_while_writing_a_checkpoint_leaves_the_last_complete_one(tmp_path):
    tests = os.path.dirname(__file__)
    code = WRITER.format(root=os.path.dirname(os.path.dirname(os.path.dirname(tests))), tests=tests, out=str(tmp_path))
    writer = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "writing"  # step-2's weights are half written
        os.kill(writer.pid, signal.SIGKILL)
    finally:
        writer.kill()
        writer.wait()
    assert any(name.startswith(".step-2") for name in _entries(tmp_path))  # the kill left its temporary directory
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-1"]
    assert load_trainer_state(latest_checkpoint(tmp_path)) == {"step": 1}  # what --resume starts from
    save_checkpoint(tmp_path, 2, _Model(), _Tokenizer(), {"step": 2})  # the resumed run writes step 2 again
    assert load_trainer_state(latest_checkpoint(tmp_path)) == {"step": 2}
    assert _entries(tmp_path) == ["step-1", "step-2"]  # and the killed writer's half-written copy is gone
    assert (latest_checkpoint(tmp_path) / "model.safetensors").read_bytes() == b"half of the weights and the rest"


@pytest.mark.slow
def test_a_run_whose_checkpoint_cannot_be_written_stops_naming_it_and_resumes(fixture_model, tmp_path, monkeypatch):
    # The real trainer on a full disk at its second checkpoint: the write fails inside the weights writer. Evaluated
    # only at the end, so at the resumed step 1 eval.parquet holds no row to keep (an empty take once crashed).
    import transformers

    from rlep.tasks.settings.train import TrainConfig
    from rlep.tasks.training.loop.steps import Trainer

    out = tmp_path / "run"
    config = TrainConfig.model_validate(
        dict(
            model=fixture_model,
            out=str(out),
            steps=2,
            prompts_per_step=2,
            samples_per_prompt=2,
            sampling={"max_tokens": 8},
            eval_every=0,
            save_every=1,
            problems={"source": "tiny-math", "limit": 4},
            engine={"backend": "transformers"},
            eval_problems={"source": "tiny-math", "split": "test", "limit": 2},
        )
    )
    real_save = transformers.PreTrainedModel.save_pretrained

    def full_disk(self, path, *args, **kwargs):
        if "step-2" in str(path):
            (Path(path) / "model.safetensors").write_bytes(b"half of the weights")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_save(self, path, *args, **kwargs)

    monkeypatch.setattr(transformers.PreTrainedModel, "save_pretrained", full_disk)
    trainer = Trainer(config, progress=False)
    try:
        with pytest.raises(
            CheckpointError,
            match=rf"{out / 'checkpoints' / 'step-2'}: checkpoint not written \(No space left on device\)",
        ):
            trainer.run()
    finally:
        trainer.close()
    assert _entries(out) == ["step-1"]  # nothing partial
    monkeypatch.undo()  # space freed: the run resumes from its last complete checkpoint and finishes
    trainer = Trainer(config, resume=True, progress=False)
    try:
        assert trainer.step == 1
        trainer.run()
    finally:
        trainer.close()
    assert _entries(out) == ["step-1", "step-2"]
    assert load_trainer_state(latest_checkpoint(out))["step"] == 2
