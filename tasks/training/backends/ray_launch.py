"""`backend.launcher: ray`: the ranks of a torch.distributed training as Ray actors that form the process group
themselves, on one node or over a cluster's nodes (as verl and open-instruct start their trainers), instead of
torchrun on this node.

A placement group reserves one bundle per rank (`cpus_per_rank` CPUs, `gpus_per_rank` GPUs, by default 1 when the
cluster has GPUs and 0 when it has none; strategy PACK: as few nodes as fit) and one actor runs in each. Rank 0's actor
names its node's address and a free port there; every actor then gets the variables torchrun would have set (RANK,
WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and runs the entry point it is given, the one
torchrun runs (`launch.main`, tasks/training/backends/launch.py): rank 0 trains, the others serve. The run directory
must be on storage every node sees (rank 0 writes it; every rank reads the launch config from it).

A rank that fails stops the others at once (as torchrun does) and the launch raises one DistributedError that
names the rank and its error.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlep.tasks.settings.backend import BackendConfig

Entry = Callable[[list[str]], None]  # a rank's entry point, called with its arguments (`launch.main`)


class RankActor:
    """One rank's process (a Ray actor)."""

    def node(self) -> tuple[str, str]:
        """(node id, node address) of this actor."""
        import ray

        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()

    def free_port(self) -> int:
        import socket

        with socket.socket() as sock:
            sock.bind(("", 0))
            return sock.getsockname()[1]

    def run(self, entry: Entry, env: dict[str, str], threads: int, argv: list[str]) -> None:
        """`entry(argv)` as the rank that `env` describes (Ray sends a module's function by its name)."""
        from rlep.tasks.runner import limit_threads

        os.environ.update(env)
        limit_threads(threads)
        entry(argv)


def rank_environments(nodes: list[tuple[str, str]], port: int, one_gpu_each: bool) -> list[dict[str, str]]:
    """torchrun's variables for each rank, given each rank's (node id, node address) in rank order.

    Ranks on one node are numbered 0, 1, ... there (LOCAL_RANK); with one GPU per actor Ray shows each actor
    only its own GPU, so every rank's device is its first (LOCAL_RANK 0)."""
    master = nodes[0][1]
    per_node: dict[str, int] = {}
    local = []
    for node_id, _ in nodes:
        local.append(per_node.get(node_id, 0))
        per_node[node_id] = local[-1] + 1
    return [
        {
            "RANK": str(rank),
            "WORLD_SIZE": str(len(nodes)),
            "LOCAL_RANK": "0" if one_gpu_each else str(local[rank]),
            "LOCAL_WORLD_SIZE": "1" if one_gpu_each else str(per_node[node_id]),
            "MASTER_ADDR": master,
            "MASTER_PORT": str(port),
        }
        for rank, (node_id, _) in enumerate(nodes)
    ]


def gpus_per_rank(setting: float | str, cluster: dict[str, float]) -> float:
    """Each rank's GPUs on a cluster whose resources are `cluster` (`ray.cluster_resources()`): `auto` is 1 where it
    has GPUs (else the ranks would run on the CPU with gloo, silently), 0 where it has none; GPUs asked of a cluster
    without any are refused now rather than left to time out unplaced."""
    from rlep.tasks.training.backends.collectives import DistributedError

    has = cluster.get("GPU", 0)
    if setting == "auto":
        return 1.0 if has >= 1 else 0.0
    if setting > 0 and not has:
        raise DistributedError(
            f"launcher ray: gpus_per_rank {setting:g} but the Ray cluster reports no GPUs ({cluster}); start Ray on "
            "the GPU nodes (or with --num-gpus), or set gpus_per_rank 0 to train on CPUs"
        )
    return float(setting)


def launch_on_ray(entry: Entry, argv: list[str], backend: BackendConfig) -> None:
    """Run `entry(argv)` on `backend.nproc` Ray actors; returns when every rank has finished."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from rlep.tasks.runner import worker_threads
    from rlep.tasks.training.backends.collectives import DistributedError

    n, cpus = backend.nproc, backend.cpus_per_rank
    started = not ray.is_initialized()
    if started:
        local = {} if backend.ray_address else {"num_cpus": max(os.cpu_count() or 1, int(n * cpus + 0.999))}
        ray.init(address=backend.ray_address, include_dashboard=False, log_to_driver=True, **local)
    try:
        gpus = gpus_per_rank(backend.gpus_per_rank, ray.cluster_resources())
    except DistributedError:
        if started:
            ray.shutdown()
        raise
    group = placement_group([{"CPU": cpus, **({"GPU": gpus} if gpus else {})}] * n, strategy="PACK")
    actors = []
    try:
        try:
            ray.get(group.ready(), timeout=backend.ray_placement_timeout)
        except ray.exceptions.GetTimeoutError:
            raise DistributedError(
                f"launcher ray: {n} ranks of {cpus:g} CPUs and {gpus:g} GPUs each could not be placed within "
                f"{backend.ray_placement_timeout:.0f}s; the cluster has {ray.cluster_resources()}"
            ) from None
        remote = ray.remote(RankActor)
        actors = [
            remote.options(
                num_cpus=cpus,
                num_gpus=gpus,
                scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=rank),
            ).remote()
            for rank in range(n)
        ]
        nodes = ray.get([actor.node.remote() for actor in actors])
        port = ray.get(actors[0].free_port.remote())
        envs = rank_environments(nodes, port, one_gpu_each=gpus >= 1)
        runs = [actor.run.remote(entry, env, worker_threads(cpus), argv) for actor, env in zip(actors, envs)]
        pending = list(runs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            try:
                ray.get(done[0])
            except ray.exceptions.RayError as err:
                rank = runs.index(done[0])
                lines = [line for line in str(err).strip().splitlines() if line.strip()]
                raise DistributedError(
                    f"launcher ray: rank {rank} of {n} failed ({lines[-1][:300] if lines else type(err).__name__}); "
                    "the other ranks were stopped; resume from the last complete checkpoint with --resume"
                ) from None
    finally:
        for actor in actors:
            ray.kill(actor)
        remove_placement_group(group)
        if started:
            ray.shutdown()
