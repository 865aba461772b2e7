"""Supervised training of the tiny model, stopped by measured accuracy on a target cell.

Why measured: accuracy on a cell rises by tens of points within a few hundred steps, and where a fixed step
count lands on that rise depends on float rounding that differs between CPUs (instruction sets, bfloat16
kernels, thread counts). One build stopped at step 1300 had 0.22 greedy accuracy on 1-decimal addition on
one machine and 0.72 on another. So the build checks greedy accuracy on held-out problems of `stop_cell`
every `check_every` steps and stops at the first check that reaches `stop_aim`. When a check jumps more than
half-way from the aim to the band's upper edge (0.30 for aim 0.25 in 0.15-0.35), training rewinds to the previous
check (weights and optimizer state; the batches are drawn up front,
so the replay is the same run) and checks every step from there. The skill at the stop is what is
reproduced across machines, not the weights.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from rlep.data.tiny_model.config import HEAD_DIM, TinyModelConfig
from rlep.data.tiny_model.evaluate import cell_accuracy
from rlep.data.tiny_model.sft_data import check_problems, collate, training_stream


@dataclass
class StopRecord:
    """What the stopping rule saw: (step, accuracy) of every check, where it stopped and why."""

    cell: str | None
    checks: list[tuple[int, float]] = field(default_factory=list)
    stopped_at: int = 0
    reason: str = "max-steps"
    rewinds: int = 0

    def to_dict(self) -> dict:
        return {
            "cell": self.cell,
            "stopped_at_step": self.stopped_at,
            "reason": self.reason,
            "rewinds": self.rewinds,
            "checks": [[s, round(a, 4)] for s, a in self.checks],
        }


def new_model(config: TinyModelConfig, tokenizer):
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    model_config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_heads,
        head_dim=HEAD_DIM,
        max_position_embeddings=config.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": config.rope_theta},
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        use_sliding_window=False,
        torch_dtype=torch.float32,
    )
    model = Qwen2ForCausalLM(model_config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=False
    )
    return model


def _lr_at(step: int, config: TinyModelConfig) -> float:
    """Linear warm-up to the peak, then cosine decay to `min_lr_ratio` x peak at the last step."""
    if step < config.warmup_steps:
        return config.learning_rate * (step + 1) / config.warmup_steps
    span = max(1, config.steps - 1 - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / span)
    cosine = 0.5 * (1 + math.cos(math.pi * progress))
    return config.learning_rate * (config.min_lr_ratio + (1 - config.min_lr_ratio) * cosine)


def _optimizer(model, config: TinyModelConfig):
    import torch

    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=config.learning_rate,
        betas=(0.9, 0.98),
    )


def supervised_train(
    model,
    tokenizer,
    config: TinyModelConfig,
    progress: bool = True,
    measure: Callable[[int], float] | None = None,
) -> tuple[list[float], StopRecord]:
    """Train `model` in place on the tiny-math stream of `config`.

    Returns the loss of every step kept and the stopping record (see the module docstring). `measure(step)`
    gives the stop cell's accuracy at a check; the default measures greedy accuracy on held-out problems
    (tests pass a scripted one).
    """
    import torch
    import torch.nn.functional as F

    batches = training_stream(config, tokenizer)
    optimizer = _optimizer(model, config)
    probes = check_problems(config) if measure is None and config.stop_cell else []
    record = StopRecord(cell=config.stop_cell)
    low, high = config.stop_band
    # A check this far past the aim (half-way to the band's edge) rewinds: aim at the band's middle, not its edge.
    near = config.stop_aim + (high - config.stop_aim) / 2 + 1e-9
    losses: list[float] = []
    # At 70 tokens, eager attention trains faster on CPU than SDPA (whose CPU flash backward dominated a
    # profile of a bf16 step); checks, generation and the saved model keep the default.
    attention = model.config._attn_implementation

    def measure_cell(step: int) -> float:
        model.set_attn_implementation(attention)
        accuracy = cell_accuracy(model, tokenizer, probes, config.answer_tokens)
        model.set_attn_implementation("eager")
        return accuracy

    if config.stop_cell is None:
        measure = None  # train the whole schedule
    elif measure is None:
        measure = measure_cell

    model.set_attn_implementation("eager")
    model.train()
    interval, below = config.check_every, None  # below: snapshot at the last check under the aim
    step = 0
    with _progress(progress) as bar:
        task = bar.add_task("SFT tiny model", total=config.steps, loss=float("nan"), check="")
        while step < config.steps:
            for group in optimizer.param_groups:
                group["lr"] = _lr_at(step, config)
            ids, labels = collate(batches[step], tokenizer.pad_token_id)
            # Right padding and a causal mask: pads only follow real tokens, so no attention mask is needed.
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=config.bf16_autocast):
                logits = model(input_ids=ids).logits[:, :-1]
            loss = F.cross_entropy(
                logits.float().reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100
            )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimizer.step()
            losses.append(loss.item())
            step += 1
            bar.update(task, completed=step, loss=sum(losses[-20:]) / len(losses[-20:]))
            if measure is None or step < config.warmup_steps or step % interval:
                continue
            accuracy = measure(step)
            record.checks.append((step, accuracy))
            bar.update(task, check=f"{config.stop_cell} {accuracy:.2f}")
            if accuracy < config.stop_aim:
                below = (step, copy.deepcopy(model.state_dict()), copy.deepcopy(optimizer.state_dict()))
                continue
            if accuracy <= near or interval == 1 or below is None:
                record.reason = "aim-reached" if low <= accuracy <= high else "aim-reached-outside-band"
                break
            # Jumped well past the aim between two checks: replay from the last check below, checking every step.
            step, weights, moments = below
            model.load_state_dict(weights)
            optimizer.load_state_dict(moments)
            del losses[step:]
            interval, record.rewinds = 1, record.rewinds + 1
    record.stopped_at = step
    model.set_attn_implementation(attention)
    model.eval()
    return losses, record


def _progress(enabled: bool):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]:.3f}"),
        TextColumn("{task.fields[check]}"),
        TimeElapsedColumn(),
        disable=not enabled,
        transient=False,
    )
