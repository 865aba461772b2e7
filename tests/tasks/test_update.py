"""policy_update on a real (fixture) model: micro-batch accumulation gives the same step as one pass."""

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM

from tasks.replay import Rollout
from tasks.training.batch import build_batch
from tasks.training.config import LossConfig
from tasks.training.update import policy_update


def _batch(n=7):
    g = torch.Generator().manual_seed(0)
    rollouts = []
    for i in range(n):
        prompt = torch.randint(3, 40, (5 + i % 3,), generator=g).tolist()
        response = torch.randint(3, 40, (2 + (i * 5) % 7,), generator=g).tolist()
        r = Rollout(problem_id=str(i), data_source="t", prompt="p", gold_answer="1", response="r",
                    response_token_ids=response, policy_version=0, prompt_token_ids=prompt,
                    behaviour_logprobs=(-torch.rand(len(response), generator=g)).tolist(), finish_reason="stop",
                    sample_index=i)  # fmt: skip
        r.origin = "replay" if i % 3 == 0 else "fresh"
        r.advantage = float(torch.randn((), generator=g))
        rollouts.append(r)
    return build_batch(rollouts, pad_id=0, step=1)


def _step(model, batch, loss, micro, ref=None, epochs=1, mini=None):
    model = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda n: 1.0)
    metrics = policy_update(model, opt, sched, batch, loss, grad_clip=1e9, ppo_epochs=epochs, mini_batch_size=mini,
                            micro_batch_size=micro, ref_model=ref, horizon=12,
                            generator=torch.Generator().manual_seed(1))  # fmt: skip
    return model, metrics


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_micro_batches_give_the_same_update(fixture_model, aggregation):
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(fixture_model, dtype=torch.float32)
    ref = copy.deepcopy(base).eval()
    with torch.no_grad():  # a policy that differs from the reference, so KL and ratios are not trivial
        for p in base.parameters():
            p.add_(0.01 * torch.randn_like(p))
    batch = _batch()
    loss = LossConfig(aggregation=aggregation, kl_coef=0.5, is_correction="truncate")
    for kwargs in ({}, {"epochs": 2, "mini": 4}):
        whole, m_whole = _step(base, batch, loss, micro=None, ref=ref, **kwargs)
        split, m_split = _step(base, batch, loss, micro=2, ref=ref, **kwargs)
        moved = sum((a - b).abs().sum() for a, b in zip(whole.parameters(), base.parameters()))
        assert moved > 1e-3  # the step did something
        for a, b in zip(whole.parameters(), split.parameters()):
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-5)  # float summation order differs
        for name in ("loss", "kl", "entropy", "clip_frac_low", "ratio_mean", "is_ratio_mean", "logprob_mismatch"):
            assert m_split[name] == pytest.approx(m_whole[name], rel=1e-3, abs=1e-5), name
