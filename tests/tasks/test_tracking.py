"""A training run's metrics in TensorBoard event files: read back, they are the rows of metrics.parquet and
eval.parquet, step for step; the log lines a step and an evaluation make; a missing tracker package is one
clear error before anything runs."""

import math

import pandas as pd
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rlep.data.run_layout import TrainRunLayout
from rlep.tasks.settings.tracker import TrackerUnavailable, check_tracker
from rlep.tasks.settings.train import TrainConfig
from rlep.tasks.training.loop.tracking import StepReport, eval_line, numeric_columns, step_line

PROBLEMS = {"source": "tiny-math", "families": ["decimal"], "levels": [1], "split": "train", "limit": 6}


def _scalars(log_dir) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series of the event files in `log_dir` (purged steps dropped, as TensorBoard shows them)."""
    events = EventAccumulator(str(log_dir), size_guidance={"scalars": 0}, purge_orphaned_data=True)
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def _config(model, out, **kw) -> TrainConfig:
    settings = dict(
        model=model,
        out=str(out),
        steps=3,
        prompts_per_step=2,
        samples_per_prompt=3,
        sampling={"max_tokens": 10},
        eval_every=2,
        save_every=2,
        problems=PROBLEMS,
        engine={"backend": "transformers"},
        tracker="tensorboard",
        eval_problems={"source": "tiny-math", "split": "test", "limit": 4},
        optimizer={"lr": 1e-3},
    )
    return TrainConfig.model_validate({**settings, **kw})


def _assert_events_match_parquet(out) -> None:
    layout = TrainRunLayout(out)
    scalars = _scalars(layout.tensorboard)
    metrics = pd.read_parquet(layout.metrics)
    numeric = [c for c in metrics.columns if c != "step" and pd.api.types.is_numeric_dtype(metrics[c])]
    assert len(numeric) > 20  # every numeric column, not a chosen few
    for column in numeric:
        written = metrics[metrics[column].notna()]
        assert scalars.get(f"train/{column}", []) == [
            (s, pytest.approx(v, rel=1e-6)) for s, v in zip(written.step, written[column])
        ], column
    evaluation = pd.read_parquet(layout.eval)
    for source, rows in evaluation.groupby("data_source"):
        for column in ("avg_at_k", "pass_at_k", "maj_at_k", "n_problems"):
            assert scalars[f"eval/{source}/{column}"] == [
                (s, pytest.approx(v, rel=1e-6)) for s, v in zip(rows.step, rows[column])
            ]
    assert set(evaluation.step) == {0, 2, 3}


@pytest.mark.slow
def test_tensorboard_events_are_the_metrics_rows_and_survive_a_resume(fixture_model, tmp_path):
    from rlep.tasks.training.trainer import train

    straight = _config(fixture_model, tmp_path / "run")
    report = StepReport(
        straight.tracker, straight.out, straight.steps, "run", settings=straight.model_dump(mode="json")
    )
    try:
        train(straight, progress=False, on_step=report)
    finally:
        report.close()
    _assert_events_match_parquet(tmp_path / "run")

    # Resumed from the step-2 checkpoint: step 3 is computed again, and its first events are purged.
    from rlep.tasks.training.backends.checkpoint import latest_checkpoint

    resumed = TrainRunLayout(tmp_path / "run")
    import shutil

    shutil.rmtree(resumed.checkpoint(3))
    assert latest_checkpoint(tmp_path / "run").name == "step-2"
    report = StepReport(straight.tracker, straight.out, straight.steps, "run")
    try:
        train(straight, resume=True, progress=False, on_step=report)
    finally:
        report.close()
    _assert_events_match_parquet(tmp_path / "run")


def test_every_numeric_column_but_step_and_nan():
    row = {"step": 4, "reward_mean": 0.5, "batch_size": 24, "replay_accuracy": float("nan"), "note": "x", "flag": True}
    assert numeric_columns(row) == {"reward_mean": 0.5, "batch_size": 24.0, "flag": 1.0}


def test_step_and_eval_lines_carry_reward_accuracy_and_phase_times():
    row = {
        "step": 3,
        "reward_mean": 0.3125,
        "accuracy": 0.25,
        "replay_share": 0.0,
        "time_step": 1.5,
        "time_generate": 0.9,
        "time_verify": 0.1,
        "time_train": 0.4,
    }
    assert (
        step_line(row, 40)
        == "step 3/40  reward 0.312  accuracy 0.250  replay 0.000  1.50 s/step (generate 0.90, verify 0.10, train 0.40)"
    )
    # A run following a pool store names the version each step replayed; NaN (a pinned pool file) shows nothing.
    assert "replay 0.000  pool v0002  1.50 s/step" in step_line({**row, "replay_pool_version": 2.0}, 40)
    assert "pool" not in step_line({**row, "replay_pool_version": float("nan")}, 40)
    rows = [
        {"data_source": "a", "k": 1, "n_problems": 2, "avg_at_k": 0.5},
        {"data_source": "all", "k": 1, "n_problems": 2, "avg_at_k": 0.5},
    ]
    assert eval_line(10, rows) == "held-out at step 10: avg@1 0.500 over 2 problems (a 0.500)"


def test_a_report_logs_a_line_per_step_and_writes_nothing_without_a_tracker(tmp_path, caplog):
    seen = []
    report = StepReport("none", tmp_path, 5, "run", then=lambda row, rows: seen.append(row["step"]))
    with caplog.at_level("INFO", logger="rlep.train"):
        report({"step": 0}, [{"data_source": "all", "k": 1, "n_problems": 3, "avg_at_k": 1 / 3}])
        report({"step": 1, "reward_mean": 0.5, "accuracy": 0.5, "time_step": 1.0}, None)
    report.close()
    assert [r.getMessage() for r in caplog.records] == [
        "held-out at step 0: avg@1 0.333 over 3 problems",
        "step 1/5  reward 0.500  accuracy 0.500  1.00 s/step",
    ]
    assert seen == [0, 1] and list(tmp_path.iterdir()) == []


def test_mlflow_missing_is_one_clear_error_when_the_settings_load(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    with pytest.raises(
        TrackerUnavailable, match=r"tracker mlflow: the `mlflow` package is not installed \(pip install mlflow\)"
    ):
        check_tracker("mlflow")
    with pytest.raises(ValueError, match="tracker mlflow: the `mlflow` package is not installed"):
        TrainConfig(tracker="mlflow")
    assert TrainConfig(tracker="tensorboard").tracker == "tensorboard"


def test_mlflow_metrics_are_the_rows(tmp_path):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    report = StepReport("mlflow", tmp_path, 2, "run", settings={"steps": 2, "loss": {"clip_low": 0.2}})
    report({"step": 1, "reward_mean": 0.25, "replay_accuracy": math.nan}, None)
    report(
        {"step": 2, "reward_mean": 0.5}, [{"data_source": "all", "step": 2, "k": 1, "n_problems": 3, "avg_at_k": 0.5}]
    )
    report.close()
    client = MlflowClient(tracking_uri=f"sqlite:///{TrainRunLayout(tmp_path).mlflow}")
    (run,) = client.search_runs([client.get_experiment_by_name("rlep").experiment_id])
    history = client.get_metric_history(run.info.run_id, "train/reward_mean")
    assert [(m.step, m.value) for m in history] == [(1, 0.25), (2, 0.5)]
    assert client.get_metric_history(run.info.run_id, "eval/all/avg_at_k")[0].value == 0.5
    assert run.data.params["loss.clip_low"] == "0.2" and not client.get_metric_history(
        run.info.run_id, "train/replay_accuracy"
    )


def test_the_step_line_shows_the_replayed_age_the_buffer_and_flat_groups_before_and_after_replay():
    row = {
        "step": 5,
        "replay_share": 0.25,
        "replay_rows": 8,
        "replay_age_mean": 1.5,
        "replay_age_max": 3.0,
        "replay_buffer_size": 120.0,
        "replay_buffer_utilisation": 0.35,
        "zero_std_group_frac_fresh": 0.5,
        "zero_std_group_frac": 0.0,
    }
    assert (
        step_line(row, 40)
        == "step 5/40  replay 0.250  age 1.5 (max 3)  buffer 120 (35% replayed)  flat groups 0.50->0.00"
    )
    quiet = {**row, "replay_rows": 0, "replay_buffer_size": float("nan"), "zero_std_group_frac": 0.5}
    assert step_line(quiet, 40) == "step 5/40  replay 0.250"  # nothing replayed, no buffer, replay changed nothing
