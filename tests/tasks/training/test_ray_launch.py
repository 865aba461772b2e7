"""The Ray launcher's choices that need no cluster: each rank's GPUs from the cluster's resources."""

import pytest

from rlep.tasks.training.backends.collectives import DistributedError
from rlep.tasks.training.backends.ray_launch import gpus_per_rank


def test_ray_ranks_get_gpus_when_the_cluster_has_them():
    assert gpus_per_rank("auto", {"CPU": 64.0, "GPU": 8.0}) == 1.0
    assert gpus_per_rank("auto", {"CPU": 2.0}) == 0.0
    assert gpus_per_rank(0.5, {"CPU": 2.0, "GPU": 1.0}) == 0.5 and gpus_per_rank(0, {"CPU": 2.0}) == 0.0
    with pytest.raises(DistributedError, match="gpus_per_rank 1 but the Ray cluster reports no GPUs"):
        gpus_per_rank(1.0, {"CPU": 2.0})
