"""Run layouts: the names of a run's files and the `step-N` rule live in one place."""

from pathlib import Path

from data.run_layout import EvalRunLayout, TrainRunLayout, checkpoint_step


def test_checkpoint_step_reads_only_step_directories():
    assert checkpoint_step("runs/x/checkpoints/step-40") == 40
    assert checkpoint_step(Path("step-0")) == 0
    assert checkpoint_step("runs/x/checkpoints/.step-40.123.tmp") is None
    assert checkpoint_step("tiny") is None
    assert checkpoint_step("step-4a") is None


def test_train_layout_names(tmp_path):
    layout = TrainRunLayout(tmp_path)
    assert layout.metrics == tmp_path / "metrics.parquet"
    assert layout.eval == EvalRunLayout(tmp_path).eval == tmp_path / "eval.parquet"
    assert layout.checkpoint(7) == tmp_path / "checkpoints" / "step-7"
    assert layout.fresh_part(7) == tmp_path / "fresh" / "part-00007.parquet"
    assert layout.final_eval.samples == tmp_path / "final_eval" / "eval_samples.parquet"
    for step in (12, 3):
        layout.fresh_part(step).parent.mkdir(exist_ok=True)
        layout.fresh_part(step).touch()
    assert layout.fresh_parts() == [(3, layout.fresh_part(3)), (12, layout.fresh_part(12))]


def test_step_checkpoints_sorted_by_step_not_by_name(tmp_path):
    layout = TrainRunLayout(tmp_path)
    assert layout.step_checkpoints() == []
    for name in ("step-10", "step-9", ".step-11.42.tmp", "notes"):
        (layout.checkpoints / name).mkdir(parents=True)
    assert layout.step_checkpoints() == [(9, layout.checkpoint(9)), (10, layout.checkpoint(10))]
