"""`rlep bench async`: both modes on the same settings, each in its own interpreter; the speed-up, the CPU
seconds per step of each process and the overlap ceiling computed from them."""

import json

import pytest

from rlep.tasks.bench.async_train import AsyncBenchConfig, run_async_bench, summarize, summarize_run
from rlep.tasks.settings.train import TrainConfig


def _rows(step_seconds, **columns):
    return [
        {
            "step": i + 1,
            "time_step": s,
            "staleness_mean": 0.0,
            "dropped_stale": 0,
            "time_generate": 0.5,
            "time_train": 1.0,
            **{name: values[i] for name, values in columns.items()},
        }
        for i, s in enumerate(step_seconds)
    ]


def test_medians_leave_out_the_warm_up_and_the_last_step():
    # Step 1 (warm-up) and step 5 (it also evaluates and saves) are left out: medians over steps 2-4.
    run = {
        "rows": _rows([9.0, 1.0, 3.0, 2.0, 20.0]),
        "cpu": {s: (2.0 * s, 0.0) for s in range(1, 6)},
        "load_before": 0.1,
        "load_after": 0.2,
    }
    summary = summarize_run(run, "sync", skip_steps=1, cores=2)
    assert summary["steps_measured"] == [2, 3, 4] and summary["step_seconds"] == 2.0
    assert summary["cpu_seconds_per_step"] == 6.0 and summary["cores_busy"] == 1.5
    assert summary["generate_seconds"] == 0.5 and summary["train_seconds"] == 1.0


def test_speedup_and_overlap_ceiling():
    pairs = [
        {"sync": {"step_seconds": 3.0}, "async": {"step_seconds": 2.0, "cpu_seconds_per_step": 5.0}},
        {"sync": {"step_seconds": 3.0}, "async": {"step_seconds": 4.0, "cpu_seconds_per_step": 5.0}},
        {"sync": {"step_seconds": 3.3}, "async": {"step_seconds": 3.0, "cpu_seconds_per_step": 6.0}},
    ]
    summary = summarize(pairs, cores=2)
    assert summary["speedup_per_pair"] == [1.5, 0.75, 1.1] and summary["speedup"] == 1.1
    # Async's work (5 CPU seconds) on 2 always-busy cores would take 2.5 s: at most 3 / 2.5 = 1.2x.
    assert summary["overlap_ceiling"] == 1.2


def test_too_few_steps_for_a_steady_median_is_refused():
    with pytest.raises(ValueError, match=r"train.steps \(3\) must be at least skip_steps \+ 2 \(4\)"):
        AsyncBenchConfig(train=TrainConfig(steps=3), skip_steps=2)


@pytest.mark.slow
def test_the_bench_runs_both_modes_and_writes_what_it_measured(fixture_model, tmp_path):
    train = TrainConfig.model_validate(
        dict(
            model=fixture_model,
            out=str(tmp_path / "runs"),
            steps=4,
            prompts_per_step=3,
            samples_per_prompt=4,
            sampling={"max_tokens": 12},
            eval_every=0,
            save_every=0,
            problems={"source": "tiny-math", "split": "train", "limit": 6},
            eval_problems={"source": "tiny-math", "split": "test", "limit": 6},
            engine={"backend": "vllm", "max_num_seqs": 64},
            replay={"kind": "fifo", "batch_size": 16},
        )
    )
    report = run_async_bench(
        AsyncBenchConfig(train=train, pairs=1, skip_steps=1, results=tmp_path / "results"), progress=False
    )
    written = json.loads(open(report["path"]).read())
    assert written["summary"] == report["summary"] and written["machine"]["cpus"] >= 1
    sync, async_ = written["pairs"][0]["sync"], written["pairs"][0]["async"]
    assert sync["steps_measured"] == async_["steps_measured"] == [2, 3]
    assert sync["staleness_mean"] == 0 and async_["staleness_mean"] == 1  # async really ran one step off-policy
    assert sync["generator_cpu_seconds"] == 0 and async_["generator_cpu_seconds"] > 0  # the generator's own process
    assert sync["trainer_cpu_seconds"] > 0 and async_["trainer_cpu_seconds"] > 0
    assert report["summary"]["speedup"] == round(sync["step_seconds"] / async_["step_seconds"], 3)
    for mode in ("sync", "async"):
        assert json.loads((tmp_path / "runs" / f"pair-1-{mode}" / "train_config.json").read_text())["mode"] == mode
