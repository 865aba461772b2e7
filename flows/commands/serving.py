"""`rlep serve`, `rlep ui`: the deployments served to a Prefect server, and a local server with its UI."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def add_serve(sub) -> None:
    p = sub.add_parser(
        "serve", help="Register the deployments (collect, train, evaluate, pipeline, scheduled recollect) and run them."
    )
    p.set_defaults(handler=cmd_serve)
    _serving_flags(p)


def add_ui(sub) -> None:
    p = sub.add_parser(
        "ui", help="Start a local Prefect server (UI on 127.0.0.1) and serve the deployments; Ctrl-C stops both."
    )
    p.set_defaults(handler=cmd_ui)
    p.add_argument("--host", default="127.0.0.1", help="Address to listen on [default: 127.0.0.1].")
    p.add_argument("--port", type=int, default=4200, help="Port of the UI and API [default: 4200].")
    p.add_argument("--home", default=".prefect", help="PREFECT_HOME for the server's database [default: .prefect].")
    _serving_flags(p)


def _serving_flags(p: argparse.ArgumentParser) -> None:
    """The deployment flags of `serve` and `ui` (ui serves the same deployments)."""
    p.add_argument(
        "--recollect-cron",
        default=None,
        metavar="CRON",
        help="Cron schedule of the recollect deployment [default: flows.deployments.DEFAULT_RECOLLECT_CRON, daily "
        "03:00].",
    )
    p.add_argument("--no-schedule", action="store_true", help="Register recollect without a schedule.")
    p.add_argument(
        "--train-dir", type=Path, default=None, help="Training run whose latest checkpoint recollect samples."
    )
    p.add_argument(
        "--pool-store", type=Path, default=Path("runs/pools"), help="Versioned pool store [default: runs/pools]."
    )


def cmd_serve(args: argparse.Namespace) -> int:
    from rlep.flows.deployments import DEFAULT_RECOLLECT_CRON, serve_deployments

    if not os.environ.get("PREFECT_API_URL"):
        print(
            "note: PREFECT_API_URL is not set; schedules and the UI need a Prefect server "
            "(`make ui` starts one on http://127.0.0.1:4200 and serves these deployments).",
            file=sys.stderr,
        )
    cron = None if args.no_schedule else (args.recollect_cron or DEFAULT_RECOLLECT_CRON)
    print(
        f"serving deployments collect, train, evaluate, pipeline, study, recollect (cron: {cron}); Ctrl-C stops",
        flush=True,
    )
    serve_deployments(recollect_cron=cron, train_dir=args.train_dir, pool_store=args.pool_store)
    return 0


def cmd_ui(args: argparse.Namespace) -> int:
    from rlep.flows import server

    log = Path(args.home) / "server.log"
    Path(args.home).mkdir(parents=True, exist_ok=True)
    process = server.start_server(args.host, args.port, Path(args.home), log)
    try:
        server.wait_healthy(args.host, args.port, process=process)
        print(f"Prefect UI: http://{args.host}:{args.port}  (server log: {log})", flush=True)
        os.environ.update(server.server_env(args.host, args.port, Path(args.home)))
        return cmd_serve(args)
    finally:
        server.stop(process)
