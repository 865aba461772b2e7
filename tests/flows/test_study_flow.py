"""The `study` flow without Ray: every run of the study a subflow of the study's flow run, each in a process of
its own, as the pipeline's runs are (the study on a local Ray: tests/tasks/study/test_study.py)."""

import json
import os

import pytest
from conftest import tiny_study_settings

from rlep.tasks.study import StudyConfig

ARMS = {"baseline": {"replay": {"kind": "none"}}, "fifo": {"replay": {"kind": "fifo"}}}


@pytest.mark.slow
@pytest.mark.parametrize("isolate", [True, False], ids=["own-processes", "in-process"])
def test_a_local_study_runs_every_run_as_a_subflow_of_its_flow_run(fixture_model, tmp_path, isolate):
    from prefect.client.orchestration import get_client
    from prefect.testing.utilities import prefect_test_harness

    from rlep.flows.study import study_flow

    with prefect_test_harness(server_startup_timeout=120):
        report = study_flow(
            StudyConfig.model_validate(
                tiny_study_settings(fixture_model, tmp_path, ARMS, seeds=[0], runner={"isolate": isolate})
            )
        )
        with get_client(sync_client=True) as client:
            runs = client.read_flow_runs()
            names = sorted(client.read_flow(r.flow_id).name for r in runs)
            parent = next(r for r in runs if client.read_flow(r.flow_id).name == "study")
            children = [client.read_task_run(r.parent_task_run_id).flow_run_id for r in runs if r.id != parent.id]
            keys = {a.key for a in client.read_artifacts()}
    assert report.endswith("report.md")
    assert names == ["evaluate", "evaluate", "study", "train", "train"]
    assert set(children) == {parent.id} and all(r.state.is_completed() for r in runs)
    assert {"study-report", "train-summary", "eval-summary"} <= keys
    records = [
        json.loads((tmp_path / "runs" / arm / "seed-0" / "run_record.json").read_text()) for arm in ("baseline", "fifo")
    ]
    processes = {r["process"] for r in records}
    if isolate:  # each run in a process of its own
        assert len(processes | {os.getpid()}) == 3
    else:
        assert processes == {os.getpid()}
