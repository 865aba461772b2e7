"""`rlep serve`, `rlep ui`: the deployments served to a Prefect server, and a local server with its UI."""

from __future__ import annotations

import argparse
import os
import sys

from rlep.flows.commands.common import UserError
from rlep.flows.options import add_model_flags, build_from_flags


def add_serve(sub) -> None:
    from rlep.flows.deployments import SERVE_FLAGS
    from rlep.tasks.settings.serve import ServeConfig

    p = sub.add_parser(
        "serve",
        help="Register the deployments (collect, train, evaluate, pipeline, study, scheduled recollect) and run them.",
    )
    p.set_defaults(handler=cmd_serve)
    add_model_flags(p, ServeConfig, only=SERVE_FLAGS)


def add_ui(sub) -> None:
    from rlep.flows.deployments import SERVE_FLAGS
    from rlep.tasks.settings.serve import ServeConfig, ServerConfig

    p = sub.add_parser(
        "ui", help="Start a local Prefect server (UI on 127.0.0.1) and serve the deployments; Ctrl-C stops both."
    )
    p.set_defaults(handler=cmd_ui)
    add_model_flags(p, ServerConfig, namespace="server")
    add_model_flags(p, ServeConfig, only=SERVE_FLAGS)  # ui serves the same deployments


def _serve_config(args: argparse.Namespace):
    """The deployments' settings, the cron checked as Prefect's schedule will read it (before a server starts)."""
    from prefect.client.schemas.schedules import validate_cron_string

    from rlep.tasks.settings.serve import ServeConfig

    config = build_from_flags(ServeConfig, args)
    if config.cron is not None:
        try:
            validate_cron_string(config.cron)
        except ValueError as error:
            raise UserError(f"--recollect-cron {config.cron!r}: {error}") from None
    return config


def cmd_serve(args: argparse.Namespace) -> int:
    return _serve(_serve_config(args))


def _serve(config) -> int:
    from rlep.flows.deployments import serve_deployments

    if not os.environ.get("PREFECT_API_URL"):
        print(
            "note: PREFECT_API_URL is not set; schedules and the UI need a Prefect server "
            "(`make ui` starts one on http://127.0.0.1:4200 and serves these deployments).",
            file=sys.stderr,
        )
    print(
        f"serving deployments collect, train, evaluate, pipeline, study, recollect (cron: {config.cron}); Ctrl-C stops",
        flush=True,
    )
    serve_deployments(config)
    return 0


def cmd_ui(args: argparse.Namespace) -> int:
    from rlep.flows import server
    from rlep.tasks.settings.serve import ServerConfig

    config = build_from_flags(ServerConfig, args, namespace="server")
    deployments = _serve_config(args)  # a bad schedule is refused before the server starts (and leaves nothing)
    log = config.home / "server.log"
    config.home.mkdir(parents=True, exist_ok=True)
    process = server.start_server(config.host, config.port, config.home, log)
    try:
        server.wait_healthy(config.host, config.port, process=process)
        print(f"Prefect UI: http://{config.host}:{config.port}  (server log: {log})", flush=True)
        os.environ.update(server.server_env(config.host, config.port, config.home))
        return _serve(deployments)
    finally:
        server.stop(process)
