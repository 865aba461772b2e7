"""The `study` flow without Ray: every run of the study a subflow of the study's flow run, each in a process of
its own, as the pipeline's runs are (the study on a local Ray: tests/tasks/study/test_study.py). What a user
watching from the Prefect UI sees of it: each run's step lines in its train flow's Logs tab, read back from the
server, and the tracker's event files beside the run's metrics."""

import json
import os

import pytest
from conftest import flow_run_logs, tiny_study_settings

from rlep.data.run_layout import TrainRunLayout
from rlep.tasks.study import StudyConfig

ARMS = {"baseline": {"replay": {"kind": "none"}}, "fifo": {"replay": {"kind": "fifo"}}}


@pytest.mark.slow
@pytest.mark.parametrize("isolate", [True, False], ids=["own-processes", "in-process"])
def test_a_local_study_runs_every_run_as_a_subflow_of_its_flow_run(prefect_runs, fixture_model, tmp_path, isolate):
    from prefect.client.orchestration import get_client

    from rlep.flows.study import study_flow

    settings = tiny_study_settings(fixture_model, tmp_path, ARMS, seeds=[0], runner={"isolate": isolate})
    settings["train"]["tracker"] = "tensorboard"
    report = study_flow(StudyConfig.model_validate(settings))
    with get_client(sync_client=True) as client:
        runs, artifacts = prefect_runs(client)
        flow_of = {r.id: client.read_flow(r.flow_id).name for r in runs}
        parent = next(r for r in runs if flow_of[r.id] == "study")
        children = [client.read_task_run(r.parent_task_run_id).flow_run_id for r in runs if r.id != parent.id]
        keys = {a.key for a in artifacts}
        trains = [r for r in runs if flow_of[r.id] == "train"]
    steps = {
        r.parameters["config"]["out"]: [log.message for log in flow_run_logs(r.id) if log.message.startswith("step ")]
        for r in trains
    }
    assert report.endswith("report.md")
    assert sorted(flow_of.values()) == ["evaluate", "evaluate", "study", "train", "train"]
    assert set(children) == {parent.id} and all(r.state.is_completed() for r in runs)
    assert {"study-report", "train-summary", "eval-summary"} <= keys
    outs = [tmp_path / "runs" / arm / "seed-0" for arm in ("baseline", "fifo")]
    # Each run's step lines reach its train flow's Logs tab, from the fresh process it runs in or from this one.
    assert sorted(steps) == sorted(str(out) for out in outs)
    assert all([line.split("  ")[0] for line in lines] == ["step 1/2", "step 2/2"] for lines in steps.values())
    assert all(TrainRunLayout(out).tensorboard.is_dir() for out in outs)
    records = [json.loads((out / "run_record.json").read_text()) for out in outs]
    processes = {r["process"] for r in records}
    if isolate:  # each run in a process of its own
        assert len(processes | {os.getpid()}) == 3
    else:
        assert processes == {os.getpid()}
