"""Log-probs taken from the final hidden states through the LM head a slice at a time: the same values, entropies and
gradients as the model's whole logits, and no [B, T, V] tensor in the forward or the backward."""

import copy

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from rlep.tasks.training.maths.logprobs import (
    LOGPROB_CHUNK_ELEMENTS,
    _body_and_head,
    logprobs_from_logits,
    token_logprobs,
)


class _LargestTensor(TorchDispatchMode):
    """Records the largest element count of any floating-point tensor an operation returns."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                self.largest = max(self.largest, t.numel())
        return out


def _whole_logits_logprobs(model, input_ids, attention_mask, temperature):
    """Today's computation before this change: the model's whole logits, then the log-softmax."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1]
    return logprobs_from_logits(logits, input_ids[:, 1:], temperature)


def _inputs(vocab, batch=3, tokens=11):
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(3, vocab, (batch, tokens), generator=g)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 8:] = 0  # right padding, as the batches have it
    attention_mask[2, 5:] = 0
    return input_ids, attention_mask


def _values_and_grads(model, fn):
    input_ids, attention_mask = _inputs(model.config.vocab_size)
    model.zero_grad(set_to_none=True)
    logp, entropy = fn(model, input_ids, attention_mask)
    weights = torch.linspace(-1, 1, logp.numel()).reshape(logp.shape)
    (logp * weights * attention_mask[:, 1:]).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logp.detach(), entropy, grads


def _assert_same(new, old):
    torch.testing.assert_close(new[0], old[0], rtol=0, atol=2e-5)
    torch.testing.assert_close(new[1], old[1], rtol=0, atol=2e-5)
    assert new[2].keys() == old[2].keys() and new[2]
    for name in old[2]:
        torch.testing.assert_close(new[2][name], old[2][name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("chunk_elements", [LOGPROB_CHUNK_ELEMENTS, 3 * 3 * 100])  # one slice; slices of 3 tokens
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_heads_slices_give_the_whole_logits_values_entropies_and_gradients(
    fixture_model, chunk_elements, temperature
):
    model = AutoModelForCausalLM.from_pretrained(fixture_model, dtype=torch.float32)
    assert model.config.vocab_size <= 100 and _body_and_head(model) is not None  # the head's path, not the fallback
    old = _values_and_grads(model, lambda m, i, a: _whole_logits_logprobs(m, i, a, temperature))
    new = _values_and_grads(model, lambda m, i, a: token_logprobs(m, i, a, temperature, chunk_elements=chunk_elements))
    _assert_same(new, old)


def test_under_lora_and_with_the_adapters_off_the_head_path_is_the_whole_logits_path(fixture_model):
    from rlep.tasks.settings.backend import LoraConfig
    from rlep.tasks.training.backends.lora import AdaptersOff, with_lora

    base = AutoModelForCausalLM.from_pretrained(fixture_model, dtype=torch.float32)
    model = with_lora(base, LoraConfig(rank=4, alpha=8.0))
    with torch.no_grad():  # adapters that act (peft starts B at zero)
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05, generator=torch.Generator().manual_seed(1))
    assert _body_and_head(model) is not None and _body_and_head(AdaptersOff(model)) is not None
    chunked = lambda m, i, a: token_logprobs(m, i, a, 0.7, chunk_elements=3 * 3 * 100)  # noqa: E731
    whole = lambda m, i, a: _whole_logits_logprobs(m, i, a, 0.7)  # noqa: E731
    _assert_same(_values_and_grads(model, chunked), _values_and_grads(model, whole))
    off = AdaptersOff(model)
    input_ids, attention_mask = _inputs(model.config.vocab_size)
    with torch.no_grad(), model.disable_adapter():
        plain = _whole_logits_logprobs(model, input_ids, attention_mask, 0.7)
    torch.testing.assert_close(token_logprobs(off, input_ids, attention_mask, 0.7, 3 * 3 * 100), plain)


def test_a_model_without_a_separable_head_falls_back_to_its_whole_logits(fixture_model):
    class Opaque(torch.nn.Module):  # no body / head to reach: the model's own logits
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask)

    model = AutoModelForCausalLM.from_pretrained(fixture_model, dtype=torch.float32)
    assert _body_and_head(Opaque(model)) is None
    input_ids, attention_mask = _inputs(model.config.vocab_size)
    with torch.no_grad():
        torch.testing.assert_close(
            token_logprobs(Opaque(model), input_ids, attention_mask), token_logprobs(model, input_ids, attention_mask)
        )


def test_no_batch_by_tokens_by_vocab_tensor_at_4k_tokens_forward_or_backward():
    """A small-hidden, large-vocab Llama at 4,096 tokens: the whole logits would be 1 x 4,095 x 32,000 (131M
    elements, 524 MB in float32); forward and backward of the log-probs never make a tensor that large."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=32_000,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config)
    batch, tokens, vocab = 1, 4096, config.vocab_size
    input_ids = torch.randint(0, vocab, (batch, tokens))
    attention_mask = torch.ones_like(input_ids)
    whole = batch * (tokens - 1) * vocab
    with _LargestTensor() as seen:
        logp, _ = token_logprobs(model, input_ids, attention_mask)
        logp.sum().backward()
    assert model.lm_head.weight.grad is not None and logp.shape == (batch, tokens - 1)
    assert seen.largest <= LOGPROB_CHUNK_ELEMENTS < whole, (seen.largest, whole)
    # the whole-logits path does make one, in the forward alone (what the head's slices are for)
    with torch.no_grad(), _LargestTensor() as seen:
        copy.copy(model)(input_ids=input_ids, attention_mask=attention_mask)
    assert seen.largest >= whole
