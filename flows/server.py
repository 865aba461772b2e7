"""A local Prefect server for the UI (`rlep ui`, `make ui`) and for tests: loopback only, offline.

`prefect server start` serves the API and the UI; the UI must be told where the API is
(PREFECT_UI_API_URL) when the port is not 4200, or it keeps calling 4200 (see FIELD_NOTES).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def server_env(host: str, port: int, home: Path | None = None) -> dict[str, str]:
    """Environment for a server on host:port and for the clients that talk to it."""
    api = f"http://{host}:{port}/api"
    env = {
        **os.environ,
        "PREFECT_API_URL": api,
        "PREFECT_UI_API_URL": api,
        "DO_NOT_TRACK": "1",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    if home is not None:
        env["PREFECT_HOME"] = str(home)
    return env


def start_server(
    host: str = "127.0.0.1", port: int = 4200, home: Path | None = None, log: Path | None = None
) -> subprocess.Popen:
    """`prefect server start` in its own process group (so it can be stopped with all its children)."""
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - owned by the child process
    return subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", host, "--port", str(port)],
        env=server_env(host, port, home),
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_healthy(host: str, port: int, timeout: float = 120.0, process: subprocess.Popen | None = None) -> None:
    """Block until the API answers /api/health; raise if it does not in time or the process died."""
    deadline = time.monotonic() + timeout
    url = f"http://{host}:{port}/api/health"
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"prefect server exited with code {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"prefect server on {host}:{port} not healthy after {timeout:.0f}s")


def stop(process: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM the process group, then SIGKILL what is left."""
    if process.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
