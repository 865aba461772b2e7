"""Prefect's Ray task runner (prefect-ray) set up from a `RunnerConfig`, for the study and for collection."""

from __future__ import annotations

from rlep.tasks.settings.runner import RunnerConfig


def ray_task_runner(runner: RunnerConfig):
    """A RayTaskRunner on a local Ray started for this flow (`max_parallel` CPUs) or on the cluster at `address`."""
    from prefect_ray import RayTaskRunner

    init = {"include_dashboard": False}
    if runner.address is None and runner.max_parallel is not None:
        init["num_cpus"] = runner.max_parallel
    if runner.address is None:
        # Without an API address each Ray worker would start its own ephemeral Prefect server (they race for
        # ports and time out under load): the workers report to this flow's server. On a cluster, set
        # PREFECT_API_URL on the workers to a server they can reach.
        from prefect.client.orchestration import get_client

        init["runtime_env"] = {"env_vars": {"PREFECT_API_URL": str(get_client(sync_client=True).api_url)}}
    return RayTaskRunner(address=runner.address, init_kwargs=init)
