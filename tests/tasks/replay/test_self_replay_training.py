"""Replay from the run itself through the real loop on the fixture model (vLLM engine, verifier, update): the
mechanism acts, as the metrics show.

The fixture model is almost never right. `reuse` is seeded from a pool of gold answers, so its all-wrong groups
get banked answers from step 1; `refill` gets groups of different rewards from DAPO's overlong penalty on the
last 2 of 12 tokens (answers that run to the limit lose reward), so some groups are flat (all equally long)
and others are not: measured with seed 0, flat shares 0.75 and 1.0 at steps 2-3 before refill, 0 after.
"""

import pyarrow.parquet as pq
import pytest
from conftest import judged_row, write_rows

from rlep.data.sources import load_problems
from rlep.tasks.settings.source import problem_source
from rlep.tasks.settings.train import TrainConfig
from rlep.tasks.training.loop.steps import Trainer

PROBLEMS = {"source": "tiny-math", "split": "train", "limit": 8}


def _run(model, out, replay, **settings):
    config = TrainConfig.model_validate(
        dict(
            model=model,
            out=str(out),
            steps=4,
            prompts_per_step=4,
            samples_per_prompt=4,
            mini_batch_prompts=2,
            sampling={"max_tokens": 12},
            eval_every=0,
            save_every=0,
            problems=PROBLEMS,
            engine={"backend": "vllm", "max_num_seqs": 64},
            eval_problems={"source": "tiny-math", "split": "test", "limit": 4},
            replay=replay,
            optimizer={"lr": 1e-3},
            **settings,
        )
    )
    trainer = Trainer(config, progress=False)
    try:
        result = trainer.run()
    finally:
        trainer.close()
    return pq.read_table(result.metrics_path).to_pandas(), pq.read_table(out / "fresh").to_pandas()


@pytest.mark.slow
def test_reuse_gives_all_wrong_groups_banked_answers(fixture_model, tmp_path):
    rows = [
        judged_row(problem, f"\\boxed{{{problem.answer}}}", sample_index=i)
        for problem in load_problems(problem_source(**PROBLEMS))
        for i in range(2)
    ]
    pool = write_rows(tmp_path / "pool.parquet", rows)
    metrics, written = _run(fixture_model, tmp_path / "run", {"kind": "reuse", "pool": str(pool)})
    assert (metrics.replay_rows > 0).all()  # every step replays banked answers
    assert (metrics.replay_accuracy == 1.0).all()  # re-scored by the verifier: right
    # The fixture model's own answers are wrong, so its groups are flat; the banked answers make them not.
    assert (metrics.zero_std_group_frac < metrics.zero_std_group_frac_fresh).all()
    assert (written.origin == "replay").sum() == metrics.replay_rows.sum()  # the run's data says what it replayed
    assert metrics.replay_buffer_size.iloc[0] >= 16  # 8 problems x 2 seeded answers (plus any own success)
    assert (metrics.replay_age_mean >= 1).all()  # in the bank since before step 1


@pytest.mark.slow
def test_refill_replaces_flat_groups_with_stored_ones(fixture_model, tmp_path):
    metrics, written = _run(fixture_model, tmp_path / "run", {"kind": "refill"}, loss={"overlong_buffer": 2})
    assert metrics.replay_rows.sum() > 0
    assert (metrics.zero_std_group_frac <= metrics.zero_std_group_frac_fresh).all()
    assert metrics.zero_std_group_frac.sum() < metrics.zero_std_group_frac_fresh.sum()  # fewer flat groups trained
    assert (metrics.batch_size == 4 * 4).all()  # the step's prompt count is kept: whole groups swapped
    refilled = metrics[metrics.replay_rows > 0]
    assert (refilled.replay_age_mean >= 1).all() and (refilled.replay_age_max >= refilled.replay_age_mean).all()
    assert (written.origin == "replay").sum() == metrics.replay_rows.sum()
