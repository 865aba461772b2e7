"""The chance control (`perturb: {reseed_at: R}`): the baseline step for step before R, other rollouts from R on,
and a resumed control keeps its stream."""

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError
from safetensors.torch import load_file

from rlep.data.run_layout import TrainRunLayout
from rlep.tasks.settings.perturb import RESEEDED_OFFSET, PerturbConfig, sampling_seed
from rlep.tasks.settings.train import TrainConfig
from rlep.tasks.study.control import compare_before
from rlep.tasks.training.loop.steps import Trainer

STEPS, RESEED_AT = 4, 3


def test_the_reseeded_stream_starts_at_its_step_and_meets_no_other_run():
    perturb = PerturbConfig(reseed_at=RESEED_AT)
    assert [sampling_seed(2, t, perturb) for t in (1, 2)] == [2_000_007, 2_000_008]  # the baseline's: 2 x 1_000_003 + t
    assert sampling_seed(2, 3, perturb) == 2_000_009 + RESEEDED_OFFSET
    # torch's CPU generator keeps a seed's low 32 bits: the streams must differ there
    plain = {sampling_seed(seed, t) % 2**32 for seed in range(0, 4294, 7) for t in range(1, 1001)}
    reseeded = {
        sampling_seed(seed, t, PerturbConfig(reseed_at=1)) % 2**32 for seed in range(0, 4294, 7) for t in range(1, 1001)
    }
    assert len(plain) == len(reseeded) == 614 * 1000 and not plain & reseeded


def test_a_control_is_refused_where_it_would_never_be_reseeded():
    with pytest.raises(ValidationError, match=r"perturb.reseed_at \(5\) is after the last step \(4\)"):
        TrainConfig(steps=4, perturb={"reseed_at": 5})
    with pytest.raises(ValidationError, match="reseed_at"):
        TrainConfig(perturb={"reseed_at": 0})
    with pytest.raises(ValidationError, match="Extra inputs"):
        TrainConfig(perturb={"reseed_at": 2, "stream": 1})
    assert TrainConfig(steps=4, perturb={"reseed_at": 4}).sampling_seed(4) == 4 + RESEEDED_OFFSET


def test_a_run_saved_before_the_control_existed_samples_as_it_did():
    saved = TrainConfig.model_validate_json(
        (Path(__file__).parents[1] / "saved" / "real-room-baseline-seed-0.train_config.json").read_text()
    )
    assert saved.perturb is None
    assert [saved.sampling_seed(t) for t in (1, 13, 30)] == [saved.seed * 1_000_003 + t for t in (1, 13, 30)]


def _config(model, out, **kw):
    return TrainConfig.model_validate(
        dict(
            model=model,
            out=str(out),
            steps=STEPS,
            prompts_per_step=3,
            samples_per_prompt=4,
            sampling={"max_tokens": 12},
            eval_every=2,
            save_every=1,
            keep_checkpoints=STEPS,
            problems={"source": "tiny-math", "split": "train", "limit": 6},
            eval_problems={"source": "tiny-math", "split": "test", "limit": 6},
            engine={"backend": "vllm", "max_num_seqs": 64},
            backend={"precision": "fp32"},
            loss={"overlong_buffer": 8},  # answers of different lengths get different rewards: the weights move
            optimizer={"lr": 1e-3},
            **kw,
        )
    )


def _train(config, resume=False):
    trainer = Trainer(config, resume=resume, progress=False)
    try:
        trainer.run()
    finally:
        trainer.close()
    return TrainRunLayout(config.out)


def _answers(layout, step):
    return pq.read_table(layout.fresh_part(step), columns=["response_token_ids"]).column(0).to_pylist()


def _metrics(layout):
    """metrics.parquet without its wall-clock columns, one row per step."""
    table = pq.read_table(layout.metrics).to_pandas().set_index("step")
    return table.drop(columns=[c for c in table if c.startswith("time_") or c == "seconds_total"])


@pytest.mark.slow
def test_the_control_is_the_baseline_until_its_step_and_differs_after(fixture_model, tmp_path):
    baseline = _train(_config(fixture_model, tmp_path / "baseline"))
    control = _train(_config(fixture_model, tmp_path / "control", perturb={"reseed_at": RESEED_AT}))

    for step in range(1, RESEED_AT):
        assert _answers(control, step) == _answers(baseline, step), step
    for step in range(RESEED_AT, STEPS + 1):
        assert _answers(control, step) != _answers(baseline, step), step
    before, after = _metrics(baseline), _metrics(control)
    assert list(after.index) == list(range(1, STEPS + 1))
    assert after.loc[: RESEED_AT - 1].equals(before.loc[: RESEED_AT - 1])  # every value, not within a tolerance
    for step in range(RESEED_AT, STEPS + 1):
        assert not after.loc[step].equals(before.loc[step]), step
    same, moved = (
        [load_file(run.checkpoint(step) / "model.safetensors") for run in (baseline, control)]
        for step in (RESEED_AT - 1, STEPS)
    )
    assert all((same[0][k] == same[1][k]).all() for k in same[0])  # the branch point: the same weights
    assert any(not (moved[0][k] == moved[1][k]).all() for k in moved[0])
    evals = [pq.read_table(run.eval).to_pandas().set_index(["step", "data_source"]) for run in (baseline, control)]
    assert evals[1].loc[[0, 2]].avg_at_k.equals(evals[0].loc[[0, 2]].avg_at_k)

    # The study report's check reads the same from the two runs' files: the same before R, parted at R.
    same = compare_before(baseline.root, control.root, RESEED_AT)
    assert (same["parted_at"], same["steps_compared"], same["evals_compared"], same["complete"]) == (-1, 2, 2, True)
    late = compare_before(baseline.root, control.root, RESEED_AT + 1)  # had R been one later, they part at R
    assert late["parted_at"] == RESEED_AT and late["control_value"] != late["baseline_value"]
    # One value changed before R, as a GPU's nondeterministic kernel would: found at its step and column.
    edited = tmp_path / "edited"
    shutil.copytree(control.root, edited)
    table = pq.read_table(TrainRunLayout(edited).metrics).to_pandas()
    table.loc[table.step == 2, "grad_norm"] += 1e-9
    table.to_parquet(TrainRunLayout(edited).metrics)
    parted = compare_before(baseline.root, edited, RESEED_AT)
    assert (parted["parted_at"], parted["parted_in"]) == (2, "grad_norm")

    # Resumed from its checkpoint before the reseed step, the control samples the re-seeded stream again: its settings
    # carry `perturb` (read back as `rlep train --resume` reads them).
    resumed_out = tmp_path / "resumed"
    shutil.copytree(control.root, resumed_out)
    for step in range(RESEED_AT, STEPS + 1):
        shutil.rmtree(TrainRunLayout(resumed_out).checkpoint(step))
    saved = TrainConfig.model_validate_json(TrainRunLayout(resumed_out).config.read_text())
    assert saved.perturb == PerturbConfig(reseed_at=RESEED_AT)
    resumed = _train(saved.model_copy(update={"out": resumed_out}), resume=True)
    for step in range(RESEED_AT, STEPS + 1):
        assert _answers(resumed, step) == _answers(control, step), step
