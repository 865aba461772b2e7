"""Log-probs over the vocabulary in slices of the sequence: the same values and gradients as the whole
computation, and no [B, T, V] float32 tensor made from bf16 logits."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rlep.tasks.training.maths.logprobs import logprobs_from_logits

B, T, V = 3, 10, 50


class _Float32Sizes(TorchDispatchMode):
    """Records the element count of every float32 tensor an operation returns."""

    def __init__(self):
        super().__init__()
        self.sizes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.dtype == torch.float32:
                self.sizes.append(t.numel())
        return out


def _inputs(dtype):
    torch.manual_seed(0)
    logits = (3 * torch.randn(B, T, V)).to(dtype).requires_grad_()
    return logits, torch.randint(0, V, (B, T))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_slices_give_the_whole_computations_values_and_gradients(dtype, temperature):
    logits, targets = _inputs(dtype)
    whole, whole_entropy = logprobs_from_logits(logits, targets, temperature)
    (grad_whole,) = torch.autograd.grad((whole * torch.arange(T)).sum(), logits)
    sliced, sliced_entropy = logprobs_from_logits(logits, targets, temperature, chunk_elements=B * V * 3)  # 4 slices
    (grad_sliced,) = torch.autograd.grad((sliced * torch.arange(T)).sum(), logits)
    assert sliced.dtype == sliced_entropy.dtype == torch.float32 and sliced.shape == (B, T)
    torch.testing.assert_close(sliced, whole, rtol=0, atol=1e-6)
    torch.testing.assert_close(sliced_entropy, whole_entropy, rtol=0, atol=1e-6)
    torch.testing.assert_close(grad_sliced.float(), grad_whole.float(), rtol=0, atol=1e-6)


def test_no_whole_float32_log_softmax_from_bf16_logits_forward_or_backward():
    logits, targets = _inputs(torch.bfloat16)
    with _Float32Sizes() as seen:
        logp, _ = logprobs_from_logits(logits, targets, 0.7, chunk_elements=B * V * 3)
        logp.sum().backward()
    assert max(seen.sizes) <= B * V * 3 < B * T * V
    # the whole computation does make one (what the slicing is for)
    with _Float32Sizes() as seen:
        logprobs_from_logits(logits, targets, 0.7)[0].sum().backward()
    assert max(seen.sizes) == B * T * V
