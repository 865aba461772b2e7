"""The one-process training backend: the seam adds nothing to `policy_update`, its state round-trips exactly,
bf16 keeps float32 master weights, activation checkpointing changes nothing but memory."""

import copy

import torch
from transformers import Qwen2Config

from rlep.data.rollout import Rollout
from rlep.tasks.settings.backend import backend_config
from rlep.tasks.settings.train import LossConfig, OptimizerConfig
from rlep.tasks.training.backends.backend import LocalBackend, make_backend
from rlep.tasks.training.backends.policy import PolicySpec, build_optimizer, load_policy
from rlep.tasks.training.maths.batch import build_batch
from rlep.tasks.training.maths.update import UpdateSettings, policy_update

TINY = Qwen2Config(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=256,
    tie_word_embeddings=True,
)


def _spec(**backend):
    """float32 unless asked: `auto` would pick bf16 on a CPU with AVX512-BF16 and change the numbers compared."""
    config = backend_config(**{"precision": "fp32", **backend})
    return PolicySpec(TINY, OptimizerConfig(lr=1e-3, warmup_steps=2), config, init_seed=3)


def _batch(seed=0, n=12):
    g = torch.Generator().manual_seed(seed)
    rollouts = []
    for i in range(n):
        response = torch.randint(1, 256, (1 + i % 9,), generator=g).tolist()
        r = Rollout(
            problem_id=str(i // 3),
            data_source="t",
            prompt="",
            gold_answer="",
            response="",
            response_token_ids=response,
            policy_version=0,
            prompt_token_ids=torch.randint(1, 256, (5,), generator=g).tolist(),
            behaviour_logprobs=(-torch.rand(len(response), generator=g)).tolist(),
        )
        r.advantage = float(torch.randn((), generator=g))
        rollouts.append(r)
    return build_batch(rollouts, 0, 1)


SETTINGS = UpdateSettings(LossConfig(), 1.0, ppo_epochs=2, micro_batch_size=5)


def _update(backend, batch):
    return backend.update(batch, SETTINGS, generator=torch.Generator().manual_seed(1))


def test_local_backend_update_is_policy_update():
    backend = make_backend(_spec())
    assert isinstance(backend, LocalBackend) and (backend.rank, backend.world_size) == (0, 1)
    model = load_policy(TINY, torch.device("cpu"), backend_config(), init_seed=3)
    optimizer, scheduler = build_optimizer(model.parameters(), OptimizerConfig(lr=1e-3, warmup_steps=2))
    for seed in range(2):
        got = _update(backend, _batch(seed))
        want = policy_update(
            model,
            optimizer,
            scheduler,
            _batch(seed),
            SETTINGS,
            generator=torch.Generator().manual_seed(1),
        )
        assert got == want
    state = backend.full_state_dict()
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert backend.lr() == scheduler.get_last_lr()[0] == 1e-3


def test_training_state_and_rng_resume_exactly():
    first = make_backend(_spec())
    _update(first, _batch(0))
    # deep copies: a state dict holds the live tensors, which the next update changes in place
    training, rng, weights = copy.deepcopy((first.training_state(), first.rng_state(), first.full_state_dict()))
    _update(first, _batch(1))
    after = torch.rand(3)

    second = make_backend(_spec())
    second.model.load_state_dict(weights)
    second.load_training_state(training)
    second.load_rng_state(rng)
    _update(second, _batch(1))
    assert torch.equal(torch.rand(3), after)
    for name, value in first.full_state_dict().items():
        assert torch.equal(second.full_state_dict()[name], value), name


def test_bf16_keeps_float32_weights_and_moves_log_probs_a_little():
    fp32, bf16 = make_backend(_spec()), make_backend(_spec(precision="bf16"))
    batch = _batch()
    m32, m16 = _update(fp32, batch), _update(bf16, batch)
    assert all(p.dtype == torch.float32 for p in bf16.model.parameters())
    assert abs(m16["loss"] - m32["loss"]) < 0.05 * max(abs(m32["loss"]), 1e-3)
    moved = max((a - b).abs().max().item() for a, b in zip(fp32.model.parameters(), bf16.model.parameters()))
    assert 0 < moved < 1e-2  # both took an AdamW step of ~lr; bf16 rounding changed it only slightly


def test_activation_checkpointing_gives_the_same_update():
    plain, checkpointed = make_backend(_spec()), make_backend(_spec(activation_checkpointing=True))
    assert checkpointed.model.is_gradient_checkpointing
    a, b = _update(plain, _batch()), _update(checkpointed, _batch())
    assert abs(a["loss"] - b["loss"]) < 1e-6 and abs(a["grad_norm"] - b["grad_norm"]) < 1e-5


def test_a_distributed_runs_optimizer_state_is_refused_by_one_process_with_the_nproc_to_use():
    import pytest

    from rlep.tasks.training.backends.checkpoint import CheckpointError

    backend = make_backend(_spec())
    state = {
        "optimizer": {"state": {"model.norm.weight": {}}, "param_groups": []},
        "scheduler": {},
        "world_size": 2,
        "strategy": "fsdp2",
    }
    with pytest.raises(CheckpointError, match="resume it with --nproc 2"):
        backend.load_training_state(state)
