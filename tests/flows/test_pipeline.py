"""The pipeline as `make demo` runs it (RLEP's three phases and a baseline, under a temporary Prefect server)
on the fixture model, the artifacts it publishes, and the order `run_pipeline` follows."""

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from rlep.data.run_layout import TrainRunLayout
from rlep.flows.pipeline import Subflows
from rlep.tasks.pipeline import plan
from rlep.tasks.settings.pipeline import PipelineConfig

PROBLEMS = {"source": "tiny-math", "families": ["decimal"], "levels": [1], "split": "train", "limit": 8}
HELD_OUT = {"source": "tiny-math", "families": ["decimal"], "levels": [1], "split": "test", "limit": 6}


def _config(model, out, replay, **extra):
    return PipelineConfig.model_validate(
        {
            "out": str(out),
            "collect": {
                "model": model,
                "problems": PROBLEMS,
                "samples_per_prompt": 3,
                "min_correct": 2,
                "shard_size": 4,
                "sampling": {"max_tokens": 10},
                "engine": {"backend": "transformers"},
            },
            "train": {
                "model": model,
                "problems": PROBLEMS,
                "eval_problems": HELD_OUT,
                "steps": 2,
                "prompts_per_step": 2,
                "samples_per_prompt": 3,
                "sampling": {"max_tokens": 10},
                "eval_every": 1,
                "replay": replay,
                "loss": {"overlong_buffer": 6},
                "engine": {"backend": "transformers"},
            },
            "evaluate": {
                "samples": 2,
                "sampling": {"max_tokens": 10},
                "problems": HELD_OUT,
                "engine": {"backend": "transformers"},
            },
            **extra,
        }
    )


class GoldSubflows(Subflows):
    """The pipeline flow's subflows, with the collection's engine right on purpose (`answer_with_gold`): the
    fixture model gets nothing right, so two right answers per problem make the demo's pool rule (at least 2
    correct of the samples) keep every problem; the third sample is the model's own. The patch is made in the
    collection's own process, where the subflow runs."""

    def collect(self, config):
        from conftest import answer_with_gold

        with pytest.MonkeyPatch.context() as patch:
            models = answer_with_gold(
                patch, lambda gold, prompt: [f"\\boxed{{{gold}}}", f"So it is \\boxed{{{gold}}}."]
            )
            result = super().collect(config)
        (Path(config.out) / "collected_from.json").write_text(json.dumps({"models": models, "process": os.getpid()}))
        return result


@pytest.mark.slow
def test_pipeline_runs_rlep_in_three_phases_and_reports(prefect_runs, fixture_model, tmp_path, monkeypatch):
    from prefect.client.orchestration import get_client

    import rlep.flows.pipeline as pipeline_module

    monkeypatch.setattr(pipeline_module, "Subflows", GoldSubflows)
    out = tmp_path / "pipe"
    config = _config(fixture_model, out, {"kind": "rlep", "replay_per_group": 2})
    report = pipeline_module.pipeline_flow(config)
    with get_client(sync_client=True) as client:
        runs, artifacts = prefect_runs(client)
        names = sorted(client.read_flow(r.flow_id).name for r in runs)
        keys = {a.key for a in artifacts}
        parent = next(r for r in runs if client.read_flow(r.flow_id).name == "pipeline")
        children = [client.read_task_run(r.parent_task_run_id).flow_run_id for r in runs if r.id != parent.id]
    text = (out / "report.md").read_text()
    assert str(out / "report.md") == report

    # explore = the baseline run (same settings); the pool is sampled from its last checkpoint ...
    explore_checkpoint = out / "baseline" / "checkpoints" / "step-2"
    collected = json.loads((out / "collect" / "collected_from.json").read_text())
    assert set(collected["models"]) == {str(explore_checkpoint)}
    pool = pq.read_table(out / "collect" / "pool.parquet").to_pandas()
    assert set(pool.model) == {str(explore_checkpoint.resolve())} and pool.correct.all()
    assert len(pool) >= 2 * PROBLEMS["limit"] and pool.problem_id.nunique() == PROBLEMS["limit"]
    # ... and RLEP restarts from the start and replays it: pooled answers joined the groups.
    rlep_metrics = pq.read_table(out / "rlep" / "metrics.parquet").to_pandas()
    assert (rlep_metrics.replay_share > 0).all() and (rlep_metrics.replay_per_group_mean > 0).all()
    assert rlep_metrics.replay_age_mean.isna().all()  # the pool is the exploration run's: no age in this run's steps
    rlep_settings = json.loads((TrainRunLayout(out / "rlep").config).read_text())
    assert rlep_settings["model"] == fixture_model  # from the start model, not the explored checkpoint
    assert rlep_settings["replay"]["pool"] == str(out / "collect" / "pool.parquet")
    assert not (out / "explore").exists()  # nothing trained twice

    for section in (
        "Phase I: collection",
        "Phase II: training",
        "| rlep |",
        "| baseline |",
        "Replay overhead",
        f"sampled from `{explore_checkpoint}`",
        "Effective M of the `rlep` arm",
        "### base",
    ):
        assert section in text, section
    assert (out / "heldout_accuracy.png").stat().st_size > 5_000
    for arm in ("rlep", "baseline"):
        assert (out / arm / "checkpoints" / "step-2" / "model.safetensors").exists()
        assert (out / "eval" / arm / "eval.parquet").exists()
    assert (out / "eval" / "base" / "eval.parquet").exists()

    assert names.count("train") == 2 and names.count("evaluate") == 3 and {"collect", "pipeline"} <= set(names)
    assert all(r.state.is_completed() for r in runs)
    # Each run is a process of its own (the report's step times share nothing), its flow still a subflow of
    # the pipeline's run.
    assert set(children) == {parent.id}
    processes = {json.loads((out / sub / "run_record.json").read_text())["process"] for sub in ("rlep", "baseline")}
    assert len(processes | {collected["process"]}) == 3 and os.getpid() not in processes
    assert {"pipeline-report", "train-summary", "train-eval", "collect-summary", "eval-summary"} <= keys


def _explorer(config):
    """(key, settings) of the run the pipeline's collection samples, or None when it samples its own model."""
    runs = {r.key: r for r in plan(config)}
    needs = runs["collect/seed-0"].needs
    return (needs[0], runs[needs[0]].config) if needs else None


def test_explore_is_the_baseline_run_only_when_it_is_the_same_run(tmp_path):
    config = _config("tiny", tmp_path, {"kind": "rlep"})
    assert _explorer(config)[0] == "baseline/seed-0"
    key, explore = _explorer(_config("tiny", tmp_path, {"kind": "rlep"}, explore_steps=5))
    assert (key, explore.steps, explore.replay.kind, explore.out) == ("explore/seed-0", 5, "none", tmp_path / "explore")
    assert _explorer(_config("tiny", tmp_path, {"kind": "rlep"}, baseline=False))[0] == "explore/seed-0"
    # A given pool, another design or `pool_from: collect-model`: no exploration run (Phase I still collects).
    assert _explorer(_config("tiny", tmp_path, {"kind": "rlep", "pool": str(tmp_path / "p.parquet")})) is None
    assert _explorer(_config("tiny", tmp_path, {"kind": "fifo"})) is None
    assert _explorer(_config("tiny", tmp_path, {"kind": "rlep"}, pool_from="collect-model")) is None
    # The start first, every arm and a separate exploration evaluated, the pool replayed by the rlep arm.
    runs = plan(_config("tiny", tmp_path, {"kind": "rlep"}, explore_steps=5))
    assert [r.key for r in runs] == [
        "evaluate/base",
        "explore/seed-0",
        "collect/seed-0",
        "rlep/seed-0",
        "baseline/seed-0",
    ]
    evaluations = {r.key: r.evaluate.out for r in runs if r.kind == "train"}
    assert evaluations == {k: tmp_path / "eval" / k.split("/")[0] for k in evaluations}
    assert runs[3].config.replay.pool == tmp_path / "collect" / "pool.parquet" and runs[3].needs == ["collect/seed-0"]


@pytest.mark.slow
def test_pipeline_without_prefect_runs_each_run_in_a_fresh_process_and_resumes(fixture_model, tmp_path, capsys):
    """`rlep pipeline --no-prefect`: the start's evaluation, the collection and both arms, each carried out in a
    process of its own (the report's step times compare runs that share nothing); run again, every finished run
    is kept and only the report is written anew."""
    import os

    import yaml

    from rlep.flows.cli import main

    out = tmp_path / "pipe"
    config = _config(fixture_model, out, {"kind": "fifo", "batch_size": 6, "buffer_size": 12})
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    assert main(["pipeline", "--config", str(path), "--no-prefect"]) == 0
    records = {
        name: json.loads((out / sub / "run_record.json").read_text())
        for name, sub in (("base", "eval/base"), ("fifo", "fifo"), ("baseline", "baseline"))
    }
    processes = {r["process"] for r in records.values()}
    assert len(processes) == 3 and os.getpid() not in processes
    report = (out / "report.md").read_text()
    assert "## Phase II: training" in report and "## Time per step" in report
    before = (out / "fifo" / "run_record.json").stat().st_mtime_ns
    assert main(["pipeline", "--config", str(path), "--no-prefect"]) == 0
    assert (out / "fifo" / "run_record.json").stat().st_mtime_ns == before  # kept, not trained again
