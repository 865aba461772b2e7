"""The pipeline as a Prefect DAG of subflows (collect -> train arms -> evaluate -> report), run under a
temporary Prefect server on the fixture model, and the artifacts it publishes."""

import pytest
from prefect.testing.utilities import prefect_test_harness

from tasks.pipeline import PipelineConfig

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def prefect_server():
    with prefect_test_harness(server_startup_timeout=120):
        yield


def test_pipeline_runs_every_stage_and_reports(prefect_server, fixture_model, tmp_path):
    from prefect.client.orchestration import get_client

    from flows.pipeline import pipeline_flow

    problems = {"source": "tiny-math", "split": "train", "limit": 8}
    held_out = {"source": "tiny-math", "split": "test", "limit": 6}
    config = PipelineConfig.model_validate({
        "out": str(tmp_path / "pipe"),
        "collect": {"model": fixture_model, "problems": problems, "samples_per_prompt": 2, "min_correct": 1,
                    "shard_size": 4, "max_tokens": 10, "engine": {"backend": "transformers"}},
        "train": {"model": fixture_model, "problems": problems, "eval_problems": held_out, "steps": 2,
                  "prompts_per_step": 2, "samples_per_prompt": 3, "max_tokens": 10, "eval_every": 1,
                  "replay": {"kind": "fifo"}, "loss": {"overlong_buffer": 6}, "engine": {"backend": "transformers"}},
        "evaluate": {"samples": 2, "max_tokens": 10, "problems": held_out, "engine": {"backend": "transformers"}},
    })  # fmt: skip
    report = pipeline_flow(config)
    out = tmp_path / "pipe"
    text = (out / "report.md").read_text()
    assert str(out / "report.md") == report
    for section in ("Phase I: collection", "Phase II: training", "| fifo |", "| baseline |", "Replay overhead", "per trained sequence"):
        assert section in text
    assert (out / "heldout_accuracy.png").stat().st_size > 5_000
    for arm in ("fifo", "baseline"):
        assert (out / arm / "checkpoints" / "step-2" / "model.safetensors").exists()
        assert (out / "eval" / arm / "eval.parquet").exists()
    assert (out / "collect" / "pool.parquet").exists()
    assert (out / "eval" / "base" / "eval.parquet").exists() and "### base" in text

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs()
        names = sorted(client.read_flow(r.flow_id).name for r in runs)
        keys = {a.key for a in client.read_artifacts()}
    assert names.count("train") == 2 and names.count("evaluate") == 3 and {"collect", "pipeline"} <= set(names)
    assert all(r.state.is_completed() for r in runs)
    assert {"pipeline-report", "train-summary", "train-eval", "collect-summary", "eval-summary"} <= keys
