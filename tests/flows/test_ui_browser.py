"""End to end in a real browser: a Prefect server on a free loopback port, rlep's deployments served,
the UI rendered by headless Chromium (deployments and the recollect schedule visible), a small collect
deployment run to completion through the API, its artifacts present. Screenshots are saved under
$RLEP_SCREENSHOT_DIR (default runs/ui-screenshots). Every process started here is stopped at the end.

Needs Debian's chromium (`make test` installs it when it can: see the Makefile).
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from rlep.flows import server

pytestmark = [pytest.mark.browser, pytest.mark.slow]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
HOST = "127.0.0.1"


def _chromium(url: str, profile: Path, *mode: str) -> str:
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--window-size=1400,900",
        "--virtual-time-budget=20000",
    ]
    done = subprocess.run([CHROMIUM, *flags, *mode, url], capture_output=True, text=True, timeout=120)
    return done.stdout


@pytest.fixture(scope="module")
def prefect_ui(tmp_path_factory):
    home = tmp_path_factory.mktemp("prefect-home")
    port = server.free_port(HOST)
    proc = server.start_server(HOST, port, home, home / "server.log")
    try:
        server.wait_healthy(HOST, port, timeout=180, process=proc)
        yield port, home
    finally:
        server.stop(proc)


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)")
def test_deployments_schedule_run_and_artifacts_in_the_ui(
    prefect_ui, fixture_model, tmp_path, monkeypatch, gold_answers
):
    port, home = prefect_ui
    api = f"http://{HOST}:{port}/api"
    shots = Path(os.environ.get("RLEP_SCREENSHOT_DIR", "runs/ui-screenshots"))
    shots.mkdir(parents=True, exist_ok=True)
    env = server.server_env(HOST, port, home)
    serve = subprocess.Popen(
        [sys.executable, "-m", "rlep.flows.cli", "serve", "--pool-store", str(tmp_path / "pools")],
        env=env,
        stdout=open(tmp_path / "serve.log", "wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        client = httpx.Client(base_url=api, timeout=30)
        deadline = time.time() + 180
        names: set[str] = set()
        while names < {"collect", "train", "evaluate", "pipeline", "study", "recollect"}:
            assert serve.poll() is None, (tmp_path / "serve.log").read_text()
            assert time.time() < deadline, f"deployments not registered: {names}"
            time.sleep(1)
            names = {d["name"] for d in client.post("/deployments/filter", json={}).json()}

        page = _chromium(f"http://{HOST}:{port}/deployments", tmp_path / "profile1", "--dump-dom")
        for name in ("collect", "train", "evaluate", "pipeline", "study", "recollect"):
            assert name in page
        assert "03:00 AM every day" in page
        _chromium(
            f"http://{HOST}:{port}/deployments", tmp_path / "profile2", f"--screenshot={shots / 'deployments.png'}"
        )
        assert (shots / "deployments.png").stat().st_size > 10_000

        config = {
            "model": fixture_model,
            "out": str(tmp_path / "collect"),
            "samples_per_prompt": 2,
            "min_correct": 1,
            "shard_size": 4,
            "sampling": {"max_tokens": 8},
            "problems": {"source": "tiny-math", "split": "train", "limit": 8},
            "engine": {"backend": "transformers"},
        }
        run = _run_deployment(client, "collect", {"config": config}, tmp_path / "serve.log", home)
        assert (tmp_path / "collect" / "pool.parquet").exists()

        artifacts = client.post("/artifacts/filter", json={"artifacts": {"flow_run_id": {"any_": [run["id"]]}}}).json()
        keys = {a["key"] for a in artifacts}
        assert {"collect-accuracy-by-source", "collect-summary"} <= keys
        assert "progress" in {a["type"] for a in artifacts}
        _chromium(
            f"http://{HOST}:{port}/runs/flow-run/{run['id']}",
            tmp_path / "profile3",
            f"--screenshot={shots / 'collect-run.png'}",
        )
        _chromium(f"http://{HOST}:{port}/artifacts", tmp_path / "profile4", f"--screenshot={shots / 'artifacts.png'}")
        assert (shots / "collect-run.png").exists() and (shots / "artifacts.png").exists()
        answer_with_gold = lambda: gold_answers(monkeypatch)  # noqa: E731
        _living_pool_from_the_ui(client, port, home, fixture_model, tmp_path, shots, config, answer_with_gold)
    finally:
        server.stop(serve)


def _run_deployment(client, name: str, parameters: dict, log: Path, home: Path) -> dict:
    """Start a run of deployment `name` through the API and wait for it to finish; it must complete.
    A server error answering the create is retried (the SQLite-backed server can answer 5xx while loaded
    cores keep a write waiting); any other answer fails here, with the server's words and its log."""
    deployment = next(d for d in client.post("/deployments/filter", json={}).json() if d["name"] == name)
    for _ in range(3):
        answer = client.post(f"/deployments/{deployment['id']}/create_flow_run", json={"parameters": parameters})
        if answer.status_code < 500:
            break
        time.sleep(5)
    server_log = home / "server.log"
    assert answer.status_code == 201, f"{name}: HTTP {answer.status_code} {answer.text[:2000]}\n" + (
        server_log.read_text()[-3000:] if server_log.exists() else ""
    )
    run = answer.json()
    deadline, state = time.time() + 300, None
    while state not in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
        assert time.time() < deadline, f"{name} run still {state}"
        time.sleep(2)
        state = client.get(f"/flow_runs/{run['id']}").json()["state"]["type"]
    assert state == "COMPLETED", log.read_text()[-3000:]
    return run


def _artifacts(client, run: dict, key: str) -> list[dict]:
    found = client.post("/artifacts/filter", json={"artifacts": {"flow_run_id": {"any_": [run["id"]]}}}).json()
    return [a for a in found if a["key"] == key]


def _living_pool_from_the_ui(client, port, home, fixture_model, tmp_path, shots, collect, answer_with_gold):
    """The living pool from the UI's side: a training run started from the `train` deployment follows a pool
    store (its per-step metrics artifact names the version each step replayed), and the `recollect` deployment
    samples that training's latest checkpoint and publishes the next version, its lineage naming the checkpoint.
    Version 1 is published here from a collection whose engine answers right on purpose (the fixture model
    gets nothing right, and an empty pool replays nothing)."""
    from rlep.data.pool import PoolStore
    from rlep.data.run_layout import CollectRunLayout
    from rlep.tasks.collect import run_collection
    from rlep.tasks.settings.collect import CollectConfig

    store, log = tmp_path / "pools", tmp_path / "serve.log"
    answer_with_gold()
    seeded = CollectConfig.model_validate({**collect, "out": str(tmp_path / "seed-pool")})
    run_collection(seeded, progress=False)
    PoolStore(store).publish(CollectRunLayout(seeded.out).pool, {"run_dir": str(seeded.out)})
    train = {
        "model": fixture_model,
        "out": str(tmp_path / "train"),
        "steps": 2,
        "prompts_per_step": 2,
        "samples_per_prompt": 2,
        "sampling": {"max_tokens": 8},
        "eval_every": 0,
        "save_every": 1,
        "problems": collect["problems"],
        "eval_problems": {"source": "tiny-math", "split": "test", "limit": 4},
        "engine": {"backend": "transformers"},
        "loss": {"overlong_buffer": 6},
        "replay": {"kind": "rlep", "pool": str(store), "follow": True, "refresh_every": 1},
    }
    trained = _run_deployment(client, "train", {"config": train}, log, home)
    rows = [row for a in _artifacts(client, trained, "train-metrics") for row in json.loads(a["data"])]
    # one table per step, each naming the pool version that step replayed
    assert sorted((row["step"], row["replay_pool_version"]) for row in rows) == [(1, 1), (2, 1)]
    again = {"train_dir": str(tmp_path / "train"), "pool_store": str(store), "collect": {**collect, "out": "unused"}}
    second = _run_deployment(client, "recollect", {"config": again}, log, home)
    lineage = PoolStore(store).lineage(2)
    assert lineage["contributions"][-1]["model"] == str(tmp_path / "train" / "checkpoints" / "step-2")
    for name, run in (("train-following-store.png", trained), ("recollect-from-training.png", second)):
        _chromium(f"http://{HOST}:{port}/runs/flow-run/{run['id']}", tmp_path / name, f"--screenshot={shots / name}")
        assert (shots / name).stat().st_size > 10_000
