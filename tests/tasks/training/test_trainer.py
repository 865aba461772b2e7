"""Training end to end on the fixture model through the real loop (vLLM engine, verifier, replay, update,
sync, checkpoint), for every replay strategy, plus kill-and-resume of a real process.

The fixture model is almost never right, so a reward signal comes from elsewhere: the RLEP pool holds
verified successes (the gold answer, boxed), and the other runs use DAPO's overlong penalty, which gives
answers of different lengths different rewards. Either way advantages are non-zero and weights must move.
"""

import json
import os
import signal
import time

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import torch
from conftest import judged_row, write_rows
from safetensors.torch import load_file

from rlep.data.fs import write_parquet_atomic
from rlep.data.pool import PoolStore
from rlep.data.run_layout import TrainRunLayout
from rlep.data.sources import load_problems
from rlep.data.trajectory import COLUMNS
from rlep.tasks.settings.source import problem_source
from rlep.tasks.settings.train import TrainConfig
from rlep.tasks.training.backends.checkpoint import latest_checkpoint
from rlep.tasks.training.loop.steps import Trainer

METRIC_COLUMNS = [
    "step",
    "reward_mean",
    "accuracy",
    "zero_std_group_frac",
    "clip_frac_low",
    "clip_frac_high",
    "kl",
    "entropy",
    "is_ratio_mean",
    "replay_share",
    "replay_age_mean",
    "grad_norm",
    "time_generate",
    "time_verify",
    "time_train",
    "time_sync",
    "tokens_generated_total",
]
EVAL_COLUMNS = ["step", "data_source", "avg_at_k", "pass_at_k", "maj_at_k", "k"]
PROBLEMS = {"source": "tiny-math", "split": "train", "limit": 6}
REWARD_MARGIN = 0.2  # seed 0 measured: -0.61 (first two steps) -> -0.04 (last two)


@pytest.fixture(scope="module")
def gold_pool(tmp_path_factory):
    """A pool of verified successes for the training problems: each gold answer, boxed, twice spelled."""
    rows = [
        judged_row(problem, text, sample_index=i)
        for problem in load_problems(problem_source(**PROBLEMS))
        for i, text in enumerate([f"\\boxed{{{problem.answer}}}", f"\\boxed{{ {problem.answer} }}"])
    ]
    return write_rows(tmp_path_factory.mktemp("pool") / "pool.parquet", rows)


def _config(model, out, replay, **kw):
    settings = dict(
        model=model,
        out=str(out),
        steps=3,
        prompts_per_step=3,
        samples_per_prompt=4,
        sampling={"max_tokens": 12},
        eval_every=2,
        save_every=2,
        problems=PROBLEMS,
        engine={"backend": "vllm", "max_num_seqs": 64},
        backend={"precision": "fp32"},  # as vLLM samples: `auto` is bf16 on a CPU with AVX512-BF16 or AMX
        eval_problems={"source": "tiny-math", "split": "test", "limit": 8},
        replay=replay,
        loss={"overlong_buffer": 8},
        optimizer={"lr": 1e-3},
    )
    settings.update(kw)
    return TrainConfig.model_validate(settings)


def _weights(path):
    return load_file(os.path.join(path, "model.safetensors"))


@pytest.mark.slow
@pytest.mark.parametrize(
    "replay",
    [
        {"kind": "none"},
        {"kind": "rlep", "replay_per_group": 2},
        {"kind": "fifo", "replay_ratio": 0.25},
        {"kind": "prioritized", "replay_fraction": 0.5, "max_age": 2},
    ],
    ids=lambda r: r["kind"],
)
def test_every_strategy_trains_end_to_end(fixture_model, gold_pool, tmp_path, replay, capsys):
    if replay["kind"] == "rlep":
        replay = {**replay, "pool": str(gold_pool)}
    trainer = Trainer(_config(fixture_model, tmp_path / "run", replay), progress=False)
    try:
        result = trainer.run()
    finally:
        trainer.close()
    metrics = pq.read_table(result.metrics_path).to_pandas()
    assert metrics.step.tolist() == [1, 2, 3]
    assert set(METRIC_COLUMNS) <= set(metrics.columns)
    assert metrics.logprob_mismatch.max() < 1e-3  # vLLM and torch agree on the sampled tokens
    evals = pq.read_table(result.eval_path).to_pandas()
    assert set(EVAL_COLUMNS) <= set(evals.columns) and sorted(set(evals.step)) == [0, 2, 3]
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step-2", "step-3"]
    assert result.final_checkpoint.name == "step-3"
    fresh = pq.read_table(tmp_path / "run" / "fresh")
    assert fresh.column_names == list(COLUMNS)
    origins = fresh.column("origin").to_pylist()  # what each step trained on: its fresh answers and the replayed ones
    assert origins.count("fresh") == 3 * 3 * 4
    assert origins.count("replay") == round((metrics.replay_share * metrics.batch_size).sum())
    sampled = fresh.filter(pc.equal(fresh["origin"], "fresh"))
    assert sorted(set(sampled.column("policy_version").to_pylist())) == [0, 1, 2]
    assert len({json.loads(s)["seed"] for s in sampled.column("sampling").to_pylist()}) == 3  # one seed per step
    before, after = _weights(fixture_model), _weights(result.final_checkpoint)
    assert any(not torch.equal(before[k], after[k]) for k in before), "training did not change the weights"
    if replay["kind"] == "none":
        assert (metrics.replay_share == 0).all()
    elif replay["kind"] == "rlep":
        # 2 replayed per group of 4 fresh: a third of the batch from step 1, all re-verified as correct.
        assert metrics.replay_share.tolist() == pytest.approx([2 / 6] * 3)
        assert (metrics.replay_accuracy == 1.0).all() and metrics.zero_std_group_frac.max() < 1
        # The gold pool answers every training problem twice: coverage printed and recorded.
        assert f"replay pool {gold_pool}: answers for 6 of 6 training problems (100%)" in capsys.readouterr().out
        assert metrics[
            ["replay_pool_coverage", "replay_pool_problems", "replay_pool_answers"]
        ].drop_duplicates().values.tolist() == [[1.0, 6, 12]]
    else:
        assert metrics.replay_share.iloc[0] == 0 and (metrics.replay_share.iloc[1:] > 0).all()
        assert (metrics.replay_age_mean.iloc[1:] >= 1).all()


def _run(config, spy=None):
    trainer = Trainer(config, progress=False)
    if spy:
        spy(trainer)
    try:
        trainer.run()
    finally:
        trainer.close()
    return pq.read_table(config.out / "metrics.parquet").to_pandas()


@pytest.mark.slow
def test_default_updates_make_the_clip_act(fixture_model, tmp_path):
    # Default loss and mini-batches (8 prompts): 16 prompts per step = 2 updates per step.
    config = TrainConfig.model_validate(
        dict(
            model=fixture_model,
            out=str(tmp_path / "clip"),
            steps=2,
            prompts_per_step=16,
            samples_per_prompt=8,
            sampling={"max_tokens": 12},
            eval_every=0,
            save_every=0,
            problems={**PROBLEMS, "limit": 32},
            engine={"backend": "vllm", "max_num_seqs": 64},
            backend={"precision": "fp32"},  # the float32 vLLM samples in (checked below)
            eval_problems={"source": "tiny-math", "split": "test", "limit": 4},
            loss={"overlong_buffer": 8},
        )
    )
    assert config.updates_per_epoch() == 2 and config.loss == type(config.loss)(overlong_buffer=8)
    metrics = _run(config)
    assert (metrics.clip_frac_low + metrics.clip_frac_high > 0).all()
    assert (metrics.ratio_mean != 1.0).all()
    assert metrics.logprob_mismatch.max() < 1e-3  # old log-probs are still those vLLM sampled with
    # the update's padding reaches metrics.parquet: answers of 1..12 tokens padded in micro-batches of 64
    assert ((metrics.padding_share > 0) & (metrics.padding_share < 0.5)).all()


@pytest.mark.slow
def test_rlep_replayed_answers_enter_the_group_statistics(fixture_model, gold_pool, tmp_path, monkeypatch):
    import rlep.tasks.training.backends.backend as backend_module
    from rlep.tasks.training.maths.advantages import group_advantages

    # The batch each real step trains on (what `policy_update` receives) and the scored groups behind it.
    groups_seen, batches = [], []
    update = backend_module.policy_update

    def recording_update(model, optimizer, scheduler, batch, *args, **kwargs):
        batches.append(batch)
        return update(model, optimizer, scheduler, batch, *args, **kwargs)

    def spy(trainer):
        mix = trainer.replay.mix

        def recording_mix(groups, step):
            groups_seen.append([[(r.origin, r.reward, r.correct) for r in g.rollouts] for g in groups])
            return mix(groups, step)

        trainer.replay.mix = recording_mix

    monkeypatch.setattr(backend_module, "policy_update", recording_update)
    config = _config(
        fixture_model,
        tmp_path / "rlep",
        {"kind": "rlep", "pool": str(gold_pool), "replay_per_group": 2},
        steps=2,
        eval_every=0,
        save_every=0,
    )
    _run(config, spy)
    assert len(batches) == len(groups_seen) == 2
    differs = 0
    for groups, batch in zip(groups_seen, batches):
        assert [o for members in groups for o, _, _ in members] == (["fresh"] * 4 + ["replay"] * 2) * 3
        assert batch.is_replay.tolist() == [o == "replay" for members in groups for o, _, _ in members]
        trained = batch.advantages.tolist()
        for i, members in enumerate(groups):
            rewards = torch.tensor([reward for _, reward, _ in members])
            assert [correct for _, _, correct in members[4:]] == [True, True]  # re-verified successes
            expected, _ = group_advantages(rewards, [0] * 6)  # over the 4 fresh and the 2 replayed answers
            assert trained[6 * i : 6 * i + 6] == pytest.approx(expected.tolist(), abs=1e-6)
            assert all(a > 0 for a in trained[6 * i + 4 : 6 * i + 6])  # replayed successes pushed up
            fresh_only, _ = group_advantages(rewards[:4], [0] * 4)
            differs += not torch.allclose(fresh_only, expected[:4])
    assert differs > 0  # the replayed rewards changed the fresh answers' advantages


@pytest.mark.slow
def test_truncated_is_weights_apply_to_stale_rows_only(fixture_model, tmp_path, monkeypatch):
    import rlep.tasks.training.maths.update as update

    weights, parts = [], []
    loss_fn, add = update.clipped_policy_loss, update._Accumulator.add
    monkeypatch.setattr(
        update, "clipped_policy_loss", lambda *a, **k: (weights.append(k["token_weights"]), loss_fn(*a, **k))[1]
    )
    monkeypatch.setattr(update._Accumulator, "add", lambda self, part, *a: (parts.append(part), add(self, part, *a))[1])
    replay = {"kind": "fifo", "batch_size": 16, "buffer_size": 64}
    config = _config(
        fixture_model,
        tmp_path / "tis",
        replay,
        steps=3,
        eval_every=0,
        save_every=0,
        mini_batch_prompts=1,
        loss={"is_correction": "truncate", "is_cap": 2.0, "overlong_buffer": 8},
    )
    metrics = _run(config)
    assert len(weights) == len(parts) > 0
    stale_rows = fresh_rows = 0
    for w, part in zip(weights, parts):
        real = part.mask.bool()
        for row in range(len(part)):
            values = w[row][real[row]]
            if part.is_replay[row]:
                stale_rows += 1
                assert (values <= 2.0).all()
            else:
                fresh_rows += 1
                assert (values == 1.0).all()
    replay_values = torch.cat(
        [w[r][p.mask.bool()[r]] for w, p in zip(weights, parts) for r in range(len(p)) if p.is_replay[r]]
    )
    assert stale_rows > 0 and fresh_rows > 0 and (replay_values != 1.0).any()
    assert (metrics.is_ratio_mean.iloc[1:] != 1.0).all()  # replayed rows from step 2 on, with behaviour log-probs


@pytest.mark.slow
def test_fifo_generates_fewer_tokens_than_it_trains_on(fixture_model, tmp_path):
    common = dict(steps=3, eval_every=0, save_every=0, prompts_per_step=4)
    base = _run(_config(fixture_model, tmp_path / "base", {"kind": "none"}, **common))
    # Compute-matched: 2 prompts x 4 generated per step, a batch of 16 (the baseline's) drawn from the buffer.
    fifo = _run(
        _config(
            fixture_model, tmp_path / "fifo", {"kind": "fifo", "batch_size": 16}, **{**common, "prompts_per_step": 2}
        )
    )
    assert base.batch_size.tolist() == [16, 16, 16]
    assert fifo.batch_size.tolist() == [8, 16, 16]  # step 1: the buffer holds only its 8 rollouts
    assert (fifo.tokens_generated_total < base.tokens_generated_total).all()
    assert fifo.tokens_generated_total.iloc[-1] < 0.7 * base.tokens_generated_total.iloc[-1]
    assert (fifo.replay_share.iloc[1:] > 0).all()


@pytest.mark.slow
def test_asymre_with_fifo_trains(fixture_model, tmp_path):
    config = _config(
        fixture_model,
        tmp_path / "asymre",
        {"kind": "fifo", "batch_size": 16},
        steps=3,
        eval_every=0,
        save_every=3,
        prompts_per_step=2,
        loss={"objective": "asymre", "asymre_delta_v": -0.1, "overlong_buffer": 8},
    )
    metrics = _run(config)
    assert "clip_frac_low" not in metrics.columns and (metrics.positive_token_frac > 0).all()
    before, after = _weights(fixture_model), _weights(latest_checkpoint(config.out))
    assert any(not torch.equal(before[k], after[k]) for k in before)


@pytest.mark.slow
def test_reward_rises_on_a_fixed_seed(fixture_model, tmp_path):
    # The fixture model is almost never right; DAPO's overlong penalty rewards shorter answers, and GRPO must
    # learn that: the mean reward of the last steps is above that of the first ones.
    config = _config(
        fixture_model,
        tmp_path / "learn",
        {"kind": "none"},
        steps=8,
        eval_every=0,
        save_every=0,
        prompts_per_step=6,
        loss={"overlong_buffer": 10},
    )
    metrics = _run(config)
    first, last = metrics.reward_mean.iloc[:2].mean(), metrics.reward_mean.iloc[-2:].mean()
    assert last > first + REWARD_MARGIN


@pytest.mark.slow
def test_kl_and_truncated_is(fixture_model, gold_pool, tmp_path):
    replay = {"kind": "rlep", "pool": str(gold_pool)}
    config = _config(
        fixture_model,
        tmp_path / "kl",
        replay,
        steps=2,
        eval_every=0,
        save_every=0,
        loss={"kl_coef": 0.1, "kl_estimator": "k3", "is_correction": "truncate", "overlong_buffer": 8},
    )
    trainer = Trainer(config, progress=False)
    assert trainer.backend.reference is not None
    try:
        trainer.run()
    finally:
        trainer.close()
    metrics = pq.read_table(tmp_path / "kl" / "metrics.parquet").to_pandas()
    assert metrics.kl.iloc[0] == 0  # the first update starts at the reference
    assert metrics.kl.iloc[1] > 0
    # The gold pool has no behaviour log-probs: nothing to correct, weights stay 1.
    assert (metrics.is_ratio_mean == 1.0).all()
    no_kl = Trainer(_config(fixture_model, tmp_path / "nokl", {"kind": "none"}, steps=1), progress=False)
    try:
        assert no_kl.backend.reference is None  # no reference model is loaded when kl_coef is 0
    finally:
        no_kl.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    "engine, replay",
    [
        ("transformers", ["--replay", "fifo", "--replay-ratio", "0.25"]),
        ("vllm", ["--replay", "rlep", "--replay-per-group", "1"]),  # 1 of the 2 pooled answers: the draw matters
        ("vllm", ["--replay", "prioritized", "--replay-fraction", "0.5", "--max-age", "2"]),
        # its bank seeded from the gold pool, so answers are replayed from step 1 (the fixture model solves little)
        ("vllm", ["--replay", "reuse", "--when", "always", "--replay-per-group", "1"]),
        # LoRA: the base rebuilt from the starting model, the adapters from the trainer state, the engine from the
        # checkpoint's merged model
        ("vllm", ["--replay", "none", "--lora-rank", "4", "--lora-target-modules", "q_proj", "v_proj"]),
    ],
    ids=["fifo-transformers", "rlep-vllm", "prioritized-vllm", "reuse-vllm", "lora-vllm"],
)
def test_kill_and_resume_reproduces_the_uninterrupted_run(
    small_run_flags, train_cli, train_here, gold_pool, tmp_path, engine, replay, assert_same_run
):
    store = PoolStore(tmp_path / "pools")
    if "rlep" in replay:  # a pool store: the run pins the version it starts with (v1) and resumes with it
        v1 = store.publish(gold_pool, {"run_dir": "gold"})
        replay = [*replay, "--pool", str(store.root)]
    if "reuse" in replay:
        replay = [*replay, "--pool", str(gold_pool)]
    common = [*small_run_flags, "--engine", engine, *replay]
    train_here([*common, "--out", str(tmp_path / "straight")])  # the uninterrupted reference, in this process
    assert (tmp_path / "straight" / "learning_curve.png").stat().st_size > 5_000

    out = tmp_path / "killed"
    proc = train_cli([*common, "--out", str(out)])
    deadline = time.time() + 300
    while latest_checkpoint(out) is None or latest_checkpoint(out).name not in ("step-2", "step-3"):
        assert proc.poll() is None, proc.stdout.read()
        assert time.time() < deadline
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    if "rlep" in replay:  # a newer version with more answers per problem: replaying it would change the draws
        table = pq.read_table(gold_pool)
        more = table.set_column(
            table.schema.get_field_index("response"),
            "response",
            pc.binary_join_element_wise("The answer is ", table["response"], ""),
        )
        write_parquet_atomic(tmp_path / "more.parquet", more)
        store.publish(tmp_path / "more.parquet", {"run_dir": "more"})
        assert store.versions() == [1, 2]
        assert json.loads((TrainRunLayout(out).config).read_text())["replay"]["pool"] == str(v1 / "pool.parquet")
    resumed = train_cli(["--resume", str(out)])
    output, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, output
    assert "Artifact creation outside" not in output  # --no-prefect does not talk to Prefect

    assert_same_run(
        tmp_path / "straight", out, 5, ("reward_mean", "accuracy", "replay_share", "tokens_generated_total", "loss")
    )
    evals = pq.read_table(out / "eval.parquet").to_pandas()
    assert sorted(set(evals.step)) == [0, 2, 4, 5] and not evals.duplicated(["step", "data_source"]).any()
    if "reuse" in replay:  # the restored bank acts after the resume: every later step replays banked answers
        metrics = pq.read_table(out / "metrics.parquet").to_pandas()
        assert (metrics[metrics.step >= 4].replay_rows > 0).all()
