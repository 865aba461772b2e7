"""LoRA through peft: only the adapters train, the engine gets the merged weights (its log-probs after a sync are
the trainer's), the checkpoint's HF model is the merged one, and a resume puts the adapters back."""

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlep.tasks.engines import make_engine
from rlep.tasks.settings.backend import LoraConfig, backend_config
from rlep.tasks.settings.engine import EngineConfig, SamplingConfig
from rlep.tasks.settings.train import OptimizerConfig, TrainConfig
from rlep.tasks.training.backends.backend import LocalBackend
from rlep.tasks.training.backends.lora import LoraTargetError
from rlep.tasks.training.backends.policy import PolicySpec
from rlep.tasks.training.maths.logprobs import completion_logprobs, pad_sequences, token_logprobs

PROMPTS = ["Q: 3+4=?\nA: ", "Q: 12*3=?\nA: "]
LORA = LoraConfig(rank=4, alpha=8.0, target_modules=["q_proj", "v_proj", "down_proj"])


def _backend(model, lora=LORA):
    return LocalBackend(PolicySpec(model, OptimizerConfig(lr=1e-2), backend_config(precision="fp32"), lora=lora))


def _train_adapters(backend):
    """Stand-in for updates: random adapters (peft starts B at zero, so the merged model would equal the base)."""
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in backend.model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn_like(p) * 0.3)


def test_only_the_adapters_train_and_the_merged_weights_keep_the_hf_names(fixture_model):
    backend = _backend(fixture_model)
    trained = [n for n, p in backend.model.named_parameters() if p.requires_grad]
    assert trained and all(".lora_A." in n or ".lora_B." in n for n in trained)
    assert {id(p) for g in backend.optimizer.param_groups for p in g["params"]} == {
        id(p) for p in backend.model.parameters() if p.requires_grad
    }
    base = AutoModelForCausalLM.from_pretrained(fixture_model, dtype=torch.float32).state_dict()
    merged = dict(backend.named_weights(torch.float32))
    assert list(merged) == list(base)  # the plain model's names and order (a tied weight under both names)
    assert all(torch.equal(merged[k], base[k]) for k in base)  # B = 0: the adapters change nothing yet
    _train_adapters(backend)
    merged = dict(backend.named_weights(torch.float32))
    changed = {k for k in base if not torch.equal(merged[k], base[k])}
    assert changed and all(k.endswith(("q_proj.weight", "v_proj.weight", "down_proj.weight")) for k in changed)


def test_the_engine_samples_from_the_merged_weights(fixture_model):
    """After a sync of the merged weights, the engine's behaviour log-probs are the LoRA policy's own."""
    backend = _backend(fixture_model)
    _train_adapters(backend)
    engine = make_engine(fixture_model, EngineConfig(backend="transformers"))
    before = [g[0].token_ids for g in engine.generate(PROMPTS, SamplingConfig(temperature=0, max_tokens=12))]
    engine.load_weights(backend.named_weights(engine.weight_dtype))
    assert [g[0].token_ids for g in engine.generate(PROMPTS, SamplingConfig(temperature=0, max_tokens=12))] != before
    sampled = engine.generate(PROMPTS, SamplingConfig(n=3, temperature=1.0, max_tokens=12, seed=1))
    flat = [c for g in sampled for c in g]
    pad = AutoTokenizer.from_pretrained(fixture_model).pad_token_id
    recomputed = completion_logprobs(
        backend.model, [c.prompt_token_ids for c in flat], [c.token_ids for c in flat], pad, temperature=1.0
    )
    gaps = [abs(a - b) for c, r in zip(flat, recomputed) for a, b in zip(c.logprobs, r)]
    assert len(gaps) == sum(len(c.token_ids) for c in flat) > 0 and max(gaps) < 1e-3


def test_a_checkpoint_holds_the_merged_model_and_the_adapters_come_back_on_resume(fixture_model, tmp_path):
    backend = _backend(fixture_model)
    _train_adapters(backend)
    backend.save_pretrained(tmp_path)
    saved = load_file(tmp_path / "model.safetensors")
    merged = dict(backend.named_weights(torch.float32))
    assert all(torch.equal(saved[k], merged[k]) for k in saved)  # a plain HF model: no adapter names
    plain = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).state_dict()
    assert all(torch.equal(plain[k], merged[k]) for k in merged)
    state = backend.training_state()
    resumed = _backend(fixture_model)
    resumed.load_training_state(state)
    restored = list(resumed.named_weights(torch.float32))
    assert [n for n, _ in restored] == list(merged)
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(restored, merged.items()))
    with pytest.raises(ValueError, match="written with LoRA adapters"):
        _backend(fixture_model, lora=None).load_training_state(state)


def test_under_bf16_the_frozen_base_is_held_in_bf16_with_the_same_log_probs_and_gradients(fixture_model, monkeypatch):
    """Autocast rounds a linear layer's weight to bf16 at every product: a frozen base held in bf16 computes the
    same log-probs and adapter gradients, bit for bit, as the float32 base it was read as, in half the memory (the
    7B shape with LoRA held 28.4 GiB of float32 frozen weights on an H100, docs/gpu.md)."""
    import rlep.tasks.training.backends.lora as lora_module

    spec = PolicySpec(fixture_model, OptimizerConfig(lr=1e-2), backend_config(precision="bf16"), lora=LORA)
    held = LocalBackend(spec)
    _train_adapters(held)
    with monkeypatch.context() as patch:  # the same policy as it was built before: its base read in float32, kept
        patch.setattr(lora_module, "frozen_base_in_bf16", lambda model: model)
        master = LocalBackend(spec)
    adapters = {n: p for n, p in held.model.state_dict().items() if ".lora_" in n}
    assert adapters and not master.model.load_state_dict(adapters, strict=False).unexpected_keys
    bf16 = {n for n, p in held.model.named_parameters() if p.dtype == torch.bfloat16}
    assert bf16 and all(n.endswith(("base_layer.weight", "base_layer.bias")) for n in bf16)
    assert all(p.dtype == torch.float32 for p in master.model.parameters())
    assert all(p.dtype == torch.float32 for p in held.model.parameters() if p.requires_grad)
    assert any(
        not torch.equal(p.float(), master.model.get_parameter(n)) for n, p in held.model.named_parameters() if n in bf16
    )
    assert sum(p.numel() * p.element_size() for p in held.model.parameters()) < sum(
        p.numel() * p.element_size() for p in master.model.parameters()
    )
    pad = AutoTokenizer.from_pretrained(fixture_model).pad_token_id
    input_ids, attention_mask, mask = pad_sequences([[5, 6, 7, 8], [9, 10, 11]], [[12, 13, 14], [15, 16, 17, 18]], pad)
    results = []
    for backend in (held, master):
        backend.model.zero_grad()
        logp, _ = token_logprobs(backend.model, input_ids, attention_mask, 1.0)
        (logp * mask).sum().backward()
        results.append((logp.detach(), {n: p.grad for n, p in backend.model.named_parameters() if p.requires_grad}))
    (held_logp, held_grads), (master_logp, master_grads) = results
    assert torch.equal(held_logp, master_logp)
    assert held_grads.keys() == master_grads.keys() and all(
        torch.equal(held_grads[n], master_grads[n]) for n in held_grads
    )
    # the merge adds the adapters in float32: a merged weight is not rounded to bf16's grid with its base
    merged = dict(held.named_weights(torch.float32))
    adapted = [k for k in merged if k.endswith(("q_proj.weight", "v_proj.weight", "down_proj.weight"))]
    assert adapted and any(not torch.equal(merged[k].bfloat16().float(), merged[k]) for k in adapted)


def test_a_tied_head_or_an_embedding_under_lora_stays_float32(fixture_model):
    """Only linear layers that own their weight go to bf16: a head tied to the embedding (the fixture's, like
    SmolLM2's) is the embedding's table, whose lookup autocast does not round."""
    lora = LoraConfig(rank=4, alpha=8.0, target_modules=["q_proj", "lm_head", "embed_tokens"])
    backend = LocalBackend(
        PolicySpec(fixture_model, OptimizerConfig(lr=1e-2), backend_config(precision="bf16"), lora=lora)
    )
    base = backend.model.get_base_model()
    assert base.config.tie_word_embeddings
    assert base.get_input_embeddings().weight.dtype == torch.float32
    assert base.get_output_embeddings().weight.dtype == torch.float32
    q = base.model.layers[0].self_attn.q_proj.base_layer
    assert q.weight.dtype == torch.bfloat16


def test_lora_settings_are_checked():
    assert TrainConfig.model_validate({"lora": {"rank": 8}}).lora.target_modules[0] == "q_proj"
    with pytest.raises(ValueError, match="lora: one training process only"):
        TrainConfig.model_validate({"lora": {}, "mode": "async", "backend": {"nproc": 2}})
    with pytest.raises(LoraTargetError, match=r"lora.target_modules \['nope'\]"):
        _backend_for_missing_module()
    from rlep.flows.cli import _user_errors

    assert LoraTargetError in _user_errors()  # the command line says it in one line, exit code 2


def _backend_for_missing_module():
    from transformers import AutoConfig

    from rlep.tasks.training.backends.lora import with_lora

    config = AutoConfig.for_model(
        "llama",
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        vocab_size=32,
    )
    with_lora(AutoModelForCausalLM.from_config(config), LoraConfig(target_modules=["nope"]))


def test_kl_under_lora_is_to_the_base_with_the_adapters_off_and_holds_no_second_copy(fixture_model):
    """The reference's log-probs are the starting model's exactly (float32), after the adapters have moved; the
    policy's own log-probs (adapters on) differ and still carry gradients after the reference's forward; and the
    reference holds no weights of its own."""
    from rlep.tasks.training.backends.lora import AdaptersOff
    from rlep.tasks.training.backends.memory import rank_memory

    spec = PolicySpec(fixture_model, OptimizerConfig(), backend_config(precision="fp32"), fixture_model, lora=LORA)
    backend = LocalBackend(spec)
    assert isinstance(backend.reference, AdaptersOff) and not list(backend.reference.parameters())
    assert rank_memory(backend.model, backend.optimizer, backend.device, backend.reference)["reference_bytes"] == 0
    _train_adapters(backend)
    tok = AutoTokenizer.from_pretrained(fixture_model)
    ids, mask, completion = pad_sequences([tok(p).input_ids for p in PROMPTS], [[5, 6, 7], [8, 9]], tok.pad_token_id)
    base = AutoModelForCausalLM.from_pretrained(fixture_model, dtype=torch.float32).eval()
    with torch.no_grad():
        expected, _ = token_logprobs(base, ids, mask, temperature=0.9)
    reference, _ = token_logprobs(backend.reference, ids, mask, temperature=0.9)
    assert torch.equal(reference, expected) and not reference.requires_grad
    policy, _ = token_logprobs(backend.model, ids, mask, temperature=0.9)
    assert not torch.allclose(policy, expected, atol=1e-3)  # the adapters are back on
    policy[completion.bool()].sum().backward()
    assert any(
        p.grad is not None and p.grad.abs().sum() > 0 for n, p in backend.model.named_parameters() if "lora_" in n
    )
