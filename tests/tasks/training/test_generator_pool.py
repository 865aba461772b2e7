"""Generation on several engines (data-parallel): how GPUs and cores are shared out, the settings that choose the
count, and a real pool of two generator processes: answers in prompt order, every engine synced."""

import pytest
import torch
from conftest import assert_samples_from, process_running

from rlep.tasks.settings.backend import backend_config
from rlep.tasks.settings.engine import EngineConfig, SamplingConfig
from rlep.tasks.settings.train import OptimizerConfig, TrainConfig
from rlep.tasks.training.backends.backend import LocalBackend
from rlep.tasks.training.backends.policy import PolicySpec
from rlep.tasks.training.generation.async_gen import GeneratorProcess
from rlep.tasks.training.generation.generator_pool import GeneratorPool, engine_shares, slices, start_generator

PROMPTS = ["Q: 3+4=?\nA: ", "Q: 12*3=?\nA: ", "Q: 9-5=?\nA: "]


def test_slices_are_contiguous_and_near_equal():
    assert slices(5, 2) == [range(0, 3), range(3, 5)]
    assert slices(2, 3) == [range(0, 1), range(1, 2), range(2, 2)]
    assert [i for part in slices(17, 4) for i in part] == list(range(17))


def test_each_engine_gets_its_own_gpus_and_a_share_of_the_cores():
    assert engine_shares(2, [4, 5, 6, 7], 2, [8, 9, 10, 11]) == [([4, 5], [8, 9]), ([6, 7], [10, 11])]
    assert engine_shares(2, [6, 7], 1, [1]) == [([6], [1]), ([7], [1])]  # fewer cores than engines: shared
    assert engine_shares(3, [], 1, [2, 3]) == [([], [2]), ([], [3]), ([], [2])]
    assert engine_shares(2, [], 1, []) == [([], []), ([], [])]
    with pytest.raises(ValueError, match=r"2 engines x tensor_parallel_size 2 need 4 GPUs"):
        engine_shares(2, [4, 5, 6], 2, [])


def test_the_engine_count_follows_the_generator_gpus_and_is_checked():
    assert TrainConfig.model_validate({"mode": "async"}).engine_count == 1
    assert TrainConfig.model_validate({"mode": "async", "generator_gpus": [6, 7]}).engine_count == 2
    four = {"mode": "async", "generator_gpus": [4, 5, 6, 7], "engine": {"tensor_parallel_size": 2}}
    assert TrainConfig.model_validate(four).engine_count == 2
    assert TrainConfig.model_validate({"mode": "async", "generator_engines": 3}).engine_count == 3  # CPU: cores
    with pytest.raises(ValueError, match="do not use them all"):
        TrainConfig.model_validate({**four, "generator_gpus": [4, 5, 6]})
    with pytest.raises(ValueError, match="do not use them all"):
        TrainConfig.model_validate({**four, "generator_engines": 1})
    with pytest.raises(ValueError, match="generator_engines 2: applies to mode async only"):
        TrainConfig.model_validate({"mode": "sync", "generator_engines": 2})


@pytest.fixture(scope="module")
def pool(fixture_model):
    generator = start_generator(fixture_model, EngineConfig(backend="transformers"), 0, 2, cores=[], gpus=[])
    yield generator
    generator.close()


def test_a_pool_answers_in_prompt_order_with_every_engine_at_the_same_version(pool, fixture_model):
    assert isinstance(pool, GeneratorPool) and len(set(pool.pids)) == 2
    greedy = SamplingConfig(temperature=0, max_tokens=12)
    one = GeneratorProcess(fixture_model, EngineConfig(backend="transformers"), version=0)
    try:
        alone = one.generate(PROMPTS, greedy)
    finally:
        one.close()
    pool.submit(("step", 1), PROMPTS, greedy)  # engine 0 answers the first two prompts, engine 1 the third
    completions, version, busy, _ = pool.receive(("step", 1))
    assert version == 0 and busy > 0
    assert [[c.token_ids for c in g] for g in completions] == [[c.token_ids for c in g] for g in alone]
    sampled = pool.generate(PROMPTS[:2], SamplingConfig(n=3, temperature=1.0, max_tokens=12, seed=5))
    assert [len(g) for g in sampled] == [3, 3]


def test_every_engine_samples_from_the_streamed_weights(pool, fixture_model):
    """Perturbed trainer weights streamed once, in 16 KiB buckets, to both engines: each engine's behaviour
    log-probs (for its slice of the prompts) are the trainer's own."""
    policy = LocalBackend(PolicySpec(fixture_model, OptimizerConfig(), backend_config(precision="fp32")))
    torch.manual_seed(0)
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    pool.bucket_bytes = 16 * 1024
    pool.push_weights(policy.named_weights(pool.weight_dtype), version=1)
    pool.submit(("step", 2), PROMPTS, SamplingConfig(n=2, temperature=1.0, max_tokens=12, seed=3))
    completions, version, _, _ = pool.receive(("step", 2))
    assert version == 1
    assert_samples_from(policy.model, completions, fixture_model)


@pytest.mark.slow
def test_an_async_run_trains_on_two_engines_within_the_staleness_bound(fixture_model, tmp_path):
    import pyarrow.parquet as pq

    from rlep.tasks.training.loop.steps import Trainer

    config = TrainConfig.model_validate(
        dict(
            model=fixture_model,
            out=str(tmp_path / "run"),
            steps=3,
            prompts_per_step=3,
            samples_per_prompt=4,
            sampling={"max_tokens": 12},
            eval_every=3,
            save_every=0,
            problems={"source": "tiny-math", "split": "train", "limit": 6},
            eval_problems={"source": "tiny-math", "split": "test", "limit": 5},
            engine={"backend": "transformers"},
            optimizer={"lr": 1e-3},
            mode="async",
            generator_engines=2,
        )
    )
    trainer = Trainer(config, progress=False)
    assert isinstance(trainer.engine, GeneratorPool)
    pids = trainer.engine.pids
    try:
        trainer.run()
    finally:
        trainer.close()
    assert not any(process_running(pid) for pid in pids), "a generator process outlived the run"
    metrics = pq.read_table(config.out / "metrics.parquet").to_pandas()
    assert metrics.staleness_max.tolist() == [0, 1, 1] and (metrics.dropped_stale == 0).all()
    fresh = pq.read_table(config.out / "fresh").to_pandas()
    assert len(fresh) == 3 * 3 * 4 and sorted(set(fresh.policy_version)) == [0, 1]
    assert sorted(set(pq.read_table(config.out / "eval.parquet").to_pandas().step)) == [0, 3]
