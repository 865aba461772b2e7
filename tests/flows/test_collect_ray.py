"""Collection shards on Ray workers (data-parallel generation, one engine per worker) give the collection a
run in one process gives: same rows, same pool, every shard sampled outside the calling process."""

import json
import os

import pandas as pd
import pytest

from rlep.data.store import read_trajectory_files
from rlep.tasks.collect import run_collection
from rlep.tasks.engines.cache import release_engines
from rlep.tasks.settings.collect import CollectConfig
from rlep.tasks.settings.runner import RunnerConfig


def _config(model, out):
    return CollectConfig.model_validate(
        dict(
            model=model,
            out=str(out),
            samples_per_prompt=4,
            min_correct=1,
            shard_size=4,
            sampling={"max_tokens": 12},
            problems={"source": "tiny-math", "families": ["decimal"], "levels": [1], "split": "train", "limit": 8},
            engine={
                "backend": "transformers"
            },  # one engine per worker either way; vLLM in a Ray worker: the study test
        )
    )


def _rows(out):
    table = read_trajectory_files(sorted((out / "trajectories").glob("part-*.parquet"))).to_pandas()
    return table[["problem_id", "sample_index", "response", "correct"]].sort_values(
        ["problem_id", "sample_index"], ignore_index=True
    )


@pytest.mark.slow
def test_shards_on_a_local_ray_match_a_collection_in_one_process(prefect_server, fixture_model, tmp_path):
    from rlep.flows.collect import collect_flow

    result = collect_flow(_config(fixture_model, tmp_path / "ray"), RunnerConfig(kind="ray", max_parallel=2))
    try:
        run_collection(_config(fixture_model, tmp_path / "local"), progress=False)
    finally:
        release_engines()

    assert result["shards"] == 2 and result["timings"]["engine_start"] == 0.0
    timings = [json.loads(line) for line in (tmp_path / "ray" / "timings.jsonl").read_text().splitlines()]
    generate_pids = {t["pid"] for t in timings if t["phase"] == "generate"}
    assert len(generate_pids) == 2 and os.getpid() not in generate_pids  # two workers, neither of them this process
    assert {t["threads"] for t in timings if t["phase"] == "generate"} == {
        1
    }  # cpus_per_run 1: one thread each (tests/tasks/test_runner.py)
    ray_rows, local_rows = _rows(tmp_path / "ray"), _rows(tmp_path / "local")
    assert len(ray_rows) == 8 * 4
    pd.testing.assert_frame_equal(ray_rows, local_rows)
    assert (tmp_path / "ray" / "manifest.json").is_file()
