"""LoRA through peft: the policy as a frozen base plus low-rank adapters, and what leaves it merged.

The optimizer sees only the adapters (peft freezes the rest), so AdamW's state is a few MB instead of 8 bytes per
parameter. Everything outside the trainer wants a plain model: the engine's weight sync and the checkpoint's HF
model get W + (alpha / rank) B A under the HF names (`merged_weights`, one layer at a time, nothing held whole), so
vLLM, evaluation and collection never learn that adapters exist. A resume rebuilds the base from the run's starting
model and loads the adapters saved in the trainer state (`adapter_state`): the checkpoint's merged model is what
the engine resumes from, so generation continues exactly. KL to the starting policy needs no second model: the
frozen base *is* the starting policy, so the reference is the policy with its adapters switched off
(`AdaptersOff`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import torch

from rlep.tasks.settings.backend import LoraConfig

ADAPTER = "default"  # peft's name of the one adapter


class LoraTargetError(ValueError):
    """`lora.target_modules` names no layer of the model (the command line says it in one line)."""


def with_lora(model: torch.nn.Module, settings: LoraConfig) -> torch.nn.Module:
    """`model` (an HF causal LM) with adapters on `settings.target_modules`: peft's wrapper, base frozen, the
    adapters' B zero so the wrapped model computes exactly what `model` did."""
    import peft

    config = peft.LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,
        target_modules=list(settings.target_modules),
        lora_dropout=0.0,  # dropout would make the ratio's old and new log-probs differ on the same weights
        bias="none",
        task_type="CAUSAL_LM",
    )
    try:
        return peft.get_peft_model(model, config)
    except ValueError as error:  # e.g. "Target modules {...} not found in the base model"
        raise LoraTargetError(f"lora.target_modules {list(settings.target_modules)}: {error}") from None


def frozen_base_in_bf16(model: torch.nn.Module) -> torch.nn.Module:
    """`model` (with adapters) with each adapted linear layer's frozen weight and bias held in bf16: under bf16
    autocast a linear layer rounds them to bf16 at every product anyway, so the products, log-probs and gradients
    are the same (tested) at half the memory; no float32 master is needed for a weight no optimizer moves. Only
    for `precision: bf16` (autocast on). Left float32: the adapters, the norms, any adapted layer that is not a
    linear one (an embedding's lookup is not autocast: a bf16 table would make the residual stream bf16) and any
    weight another module shares (a head tied to the embedding)."""
    from peft.tuners.lora import LoraLayer

    owners = Counter(id(tensor) for _, tensor in model.named_parameters(remove_duplicate=False))
    for module in model.modules():
        base = module.get_base_layer() if isinstance(module, LoraLayer) else None
        if not isinstance(base, torch.nn.Linear):
            continue
        for tensor in (base.weight, base.bias):
            if tensor is not None and owners[id(tensor)] == 1:
                tensor.data = tensor.data.to(torch.bfloat16)
    return model


def is_lora(model: torch.nn.Module) -> bool:
    return hasattr(model, "peft_config")


class AdaptersOff(torch.nn.Module):
    """The KL reference of a LoRA policy: its own frozen base, run with the adapters switched off and no grad. It
    holds no weights of its own (its `parameters()` are empty, so memory reports charge it nothing): a 7B policy
    with KL keeps one copy of the model, not two. Under bf16 it computes as the policy does (bf16 base linear
    weights, float32 embeddings and norms, autocast), not as a separate all-bf16 reference would."""

    def __init__(self, policy: torch.nn.Module) -> None:
        super().__init__()
        if not is_lora(policy):
            raise TypeError(f"AdaptersOff needs a peft LoRA model, not {type(policy).__name__}")
        self._policy = [policy]  # in a list: not a submodule, so not counted or moved as this module's

    @property
    def device(self) -> torch.device:
        return next(self._policy[0].parameters()).device

    def forward(self, *args, **kwargs):
        policy = self._policy[0]
        with torch.no_grad(), policy.disable_adapter():
            return policy(*args, **kwargs)


def merged_weights(model: torch.nn.Module, dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
    """The merged model's state dict under the base model's HF names, one tensor at a time in `dtype`: an adapted
    layer's weight is base + delta (computed when asked for, then dropped), every other tensor is the base's own.
    A tied weight goes under both names, as `weight_sync.named_weights` sends it."""
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    adapted = {name: module for name, module in base.named_modules() if isinstance(module, LoraLayer)}
    for key, value in base.state_dict().items():
        if ".lora_" in key:
            continue
        name = key.replace(".base_layer.", ".")
        owner = name.rsplit(".", 1)[0]
        if name.endswith(".weight") and owner in adapted:
            with torch.no_grad():
                value = value.float() + adapted[owner].get_delta_weight(ADAPTER).float()  # a bf16 base too
        yield name, value.detach().to(dtype)


def adapter_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The adapters' tensors (what training changed), for the trainer state of a checkpoint."""
    from peft import get_peft_model_state_dict

    return {k: v.detach().clone() for k, v in get_peft_model_state_dict(model).items()}


def load_adapter_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Put saved adapters back (a resume); a missing or unexpected adapter tensor is an error naming it."""
    from peft import set_peft_model_state_dict

    result = set_peft_model_state_dict(model, state)
    missing = [k for k in result.missing_keys if ".lora_" in k]
    if missing or result.unexpected_keys:
        raise ValueError(
            f"the checkpoint's LoRA adapters do not fit this run's (lora settings changed?): missing {missing[:3]}, "
            f"unexpected {list(result.unexpected_keys)[:3]}"
        )
