"""`rlep bench fanout`: the two studies it times are the same runs, differing only in how they are executed."""

from rlep.tasks.bench.fanout import FanoutBenchConfig
from rlep.tasks.study import StudyConfig, plan


def test_the_two_sides_run_the_same_runs_with_default_threads_locally(tmp_path):
    config = FanoutBenchConfig(model="m", out=tmp_path)
    local, ray = (StudyConfig.model_validate(config.study(runner)) for runner in ("local", "ray"))
    assert local.runner.kind == "local" and ray.runner.kind == "ray" and ray.runner.max_parallel == 2
    runs = [plan(c) for c in (local, ray)]
    assert [[r.key for r in side] for side in runs] == [["baseline/seed-0", "twin/seed-0"]] * 2
    for a, b in zip(*runs):  # the same training, only the output directory differs
        assert a.config.model_dump(exclude={"out"}) == b.config.model_dump(exclude={"out"})
