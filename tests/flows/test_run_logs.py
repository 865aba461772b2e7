"""What a user watching from the Prefect UI sees: a training run's step and evaluation lines in its Logs tab
(read back from the server), from a flow called here and from the `rlep` command, whose library output stays
in the run's rlep.log; and the tracker's event files beside metrics.parquet. A study's runs, locally and on Ray:
tests/flows/test_study_flow.py and tests/tasks/study/test_study.py, on the runs those tests make anyway."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import flow_run_logs

from rlep.data.run_layout import TrainRunLayout
from rlep.tasks.settings.train import TrainConfig

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = dict(
    steps=2,
    prompts_per_step=2,
    samples_per_prompt=3,
    sampling={"max_tokens": 10},
    eval_every=1,
    save_every=0,
    problems={"source": "tiny-math", "families": ["decimal"], "levels": [1], "split": "train", "limit": 6},
    eval_problems={"source": "tiny-math", "split": "test", "limit": 4},
    engine={"backend": "transformers"},
)


def _step_lines(logs) -> list[str]:
    return [log.message for log in logs if log.message.startswith(("step ", "held-out at step "))]


@pytest.mark.slow
def test_a_train_flow_logs_its_steps_to_its_run_and_writes_the_tracker(prefect_server, fixture_model, tmp_path):
    from rlep.flows.train import train_flow

    config = TrainConfig.model_validate(
        {**SETTINGS, "model": fixture_model, "out": str(tmp_path / "run"), "tracker": "tensorboard"}
    )
    state = train_flow(config, return_state=True)
    assert state.is_completed()
    logs = flow_run_logs(state.state_details.flow_run_id)
    lines = _step_lines(logs)
    assert [line.split("  ")[0] for line in lines if line.startswith("step ")] == ["step 1/2", "step 2/2"]
    assert all(" s/step (generate " in line and "reward " in line for line in lines if line.startswith("step "))
    assert [line.split(":")[0] for line in lines if line.startswith("held-out")] == [
        f"held-out at step {s}" for s in (0, 1, 2)
    ]
    assert all(log.task_run_id is not None for log in logs if log.message in lines)  # in the run-training task's tab
    assert any(p.name.startswith("events.out.tfevents") for p in TrainRunLayout(tmp_path / "run").tensorboard.iterdir())


@pytest.mark.slow
def test_the_rlep_command_sends_step_lines_to_the_server_and_library_output_to_its_log(
    prefect_server, fixture_model, tmp_path
):
    """`rlep train` quiets Prefect's own console lines (PREFECT_LOGGING_LEVEL=WARNING); before, that also
    dropped every INFO line of the flow runs, so the UI showed none."""
    from prefect.client.orchestration import get_client

    out = tmp_path / "cli"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_LOGGING")}
    env.update(PREFECT_API_URL=prefect_server, VLLM_ENABLE_V1_MULTIPROCESSING="0")
    flags = [
        "--model",
        fixture_model,
        "--out",
        str(out),
        "--steps",
        "2",
        "--prompts-per-step",
        "2",
        "--samples-per-prompt",
        "3",
        "--max-tokens",
        "10",
        "--eval-every",
        "1",
        "--save-every",
        "0",
        "--engine",
        "transformers",
        "--problems-limit",
        "6",
        "--problems-families",
        "decimal",
        "--eval-problems-limit",
        "4",
        "--tracker",
        "tensorboard",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "rlep.flows.cli", "train", *flags],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with get_client(sync_client=True) as client:
        (run,) = [r for r in client.read_flow_runs() if r.parameters.get("config", {}).get("out") == str(out)]
    lines = _step_lines(flow_run_logs(run.id))
    assert (
        sum(line.startswith("step ") for line in lines) == 2 and sum(line.startswith("held-out") for line in lines) == 3
    )
    log = (out / "rlep.log").read_text()
    assert "step 2/2" in log  # the console copy of the same lines, with the libraries' output
    assert "step 2/2" not in done.stdout + done.stderr and "Beginning flow run" not in done.stdout + done.stderr
