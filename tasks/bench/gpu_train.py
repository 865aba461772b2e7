"""Parts (c), (d) and (e) of `rlep bench gpu`: the training loop itself on the device, 2 steps, a checkpoint, a
resume to step 3; part `train` with the `transformers` engine, part `async` the same in `mode: async` (the engine
in a generator process of its own, the weights crossing after each update through the bucket the placement picks:
`cuda-ipc` where both share the GPU, `shared-memory` on the CPU), part `vllm` with the vLLM engine.

The real `tasks.training.trainer.train` (in async mode the first run is the loop's own `Trainer`, which `train` runs
in its process, so that the bucket its generator got can be read), one training process: the engine generates on the
GPU, the sandboxed verifier scores, the backend updates on the GPU in the precision `auto` picks there (bf16 on an
H100), the weights are synced into the engine (with vLLM, in the trainer's process: vLLM's in-place weight reload),
`step-2` is written, and a second `train(..., resume=True)` loads it and trains step 3. The policy is a random-init
tiny Qwen2 with the project's character tokenizer (data/tiny_model's architecture at fixture size, no supervised
training, nothing from the hub): it answers nothing right, so the reward gives answers with no number -1 and wrong
ones 0, which makes the groups' rewards differ (a random model writes a digit in most answers, not all) and the
update act.

Asserts: metrics for steps 1-3, every loss finite, the run resumed at step 2 (two starts recorded in
resolved_settings.json, the second at step 2, both on the expected device), at least one group with a reward
spread, no verdict from a failed verifier worker (timeout, memory, crash), and the step-3 checkpoint's weights
away from the starting ones; in async mode also rollouts at most `max_staleness` versions old and the weights
through the bucket expected on the device. Records the third-party packages the process imported (what a
machine needs installed for the loop, the verifier's workers aside).
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

STEPS = 3
# Verdicts that say a verifier worker failed (a missing math-verify in the worker, say), not the answer.
WORKER_FAILURES = {"timeout", "memory", "crash"}


def tiny_policy(directory: Path) -> Path:
    """A random-init tiny Qwen2 + the character tokenizer, saved as an HF model directory."""
    import torch

    from rlep.data.tiny_model import TinyModelConfig
    from rlep.data.tiny_model.training import new_model
    from rlep.data.tokenizer import save_tokenizer

    config = TinyModelConfig.fixture()
    tokenizer = save_tokenizer(directory, model_max_length=config.max_position_embeddings)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = new_model(config, tokenizer)
    model.save_pretrained(directory, safe_serialization=True)
    return directory


def train_config(model: Path, out: Path, steps: int, engine: str = "transformers", mode: str = "sync"):
    from rlep.tasks.settings.train import TrainConfig

    return TrainConfig.model_validate(
        dict(
            model=str(model),
            out=str(out),
            mode=mode,
            steps=steps,
            prompts_per_step=4,
            samples_per_prompt=8,
            sampling={"max_tokens": 8},
            eval_every=0,
            save_every=1,
            problems={"source": "tiny-math", "limit": 16},
            eval_problems={"source": "tiny-math", "split": "test", "limit": 4},
            engine={"backend": engine, **({"max_num_seqs": 64} if engine == "vllm" else {})},  # 32 sequences a step
            reward={"no_answer": -1.0},
            optimizer={"lr": 1e-3},
            micro_batch_size=16,
        )
    )


def imported_packages() -> list[str]:
    """Distributions of the third-party modules this process has imported (the standard library and rlep aside).
    A top-level name several distributions share (the `google` namespace) counts for those whose files were loaded."""
    from importlib.metadata import distribution, packages_distributions

    owners = packages_distributions()
    modules = dict(sys.modules)
    tops = {name.split(".")[0] for name in modules} - set(sys.stdlib_module_names) - {"rlep", "__main__"}
    found = set()
    for top in (t for t in tops if not t.startswith("_")):
        dists = owners.get(top, [])
        if len(dists) > 1:
            loaded = {str(Path(m.__file__).resolve()) for m in modules.values() if getattr(m, "__file__", None)}
            dists = [d for d in dists if any(str(f.locate().resolve()) in loaded for f in distribution(d).files or [])]
        found.update(dists)
    return sorted(found)


def run_training(work: Path, device: str, engine: str = "transformers", mode: str = "sync") -> dict[str, Any]:
    """The steps of the module docstring with `engine` generating, in `mode`; returns the facts and raises on a
    failed check."""
    import pyarrow.parquet as pq
    from safetensors.torch import load_file

    from rlep.data.run_layout import TrainRunLayout
    from rlep.tasks.training.backends.precision import recorded_precision
    from rlep.tasks.training.trainer import train

    model = tiny_policy(work / "tiny_policy")
    out = work / "train_run"
    shutil.rmtree(out, ignore_errors=True)  # a kept --work's earlier check: this one trains from scratch
    began = time.perf_counter()
    config = train_config(model, out, STEPS - 1, engine, mode)
    transport = None
    if mode == "async":
        transport = _async_run(config)
    else:
        train(config, progress=False)
    first = time.perf_counter() - began
    result = train(train_config(model, out, STEPS, engine, mode), resume=True, progress=False)
    resumed = time.perf_counter() - began - first
    layout = TrainRunLayout(out)
    rows = pq.read_table(layout.metrics).to_pylist()
    reasons = Counter(
        r for _, part in layout.fresh_parts() for r in pq.read_table(part).column("verdict_reason").to_pylist()
    )
    starts = recorded_precision(out)
    start_weights = load_file(model / "model.safetensors")
    final_weights = load_file(Path(result.final_checkpoint) / "model.safetensors")
    changed = max(float((final_weights[k] - start_weights[k]).abs().max()) for k in start_weights)
    facts = {
        "engine": engine,
        "mode": mode,
        "weights_transport": transport,  # async: the bucket the generator's weights crossed through
        "staleness_max": [r.get("staleness_max") for r in rows],
        "steps": [r["step"] for r in rows],
        "losses": [r.get("loss") for r in rows],
        "reward_mean": [r.get("reward_mean") for r in rows],
        "zero_std_group_frac": [r.get("zero_std_group_frac") for r in rows],
        "time_step": [r.get("time_step") for r in rows],
        "logprob_mismatch": [r.get("logprob_mismatch") for r in rows],
        "precision": [{k: s[k] for k in ("step", "precision", "device", "reason")} for s in starts],
        "verdict_reasons": dict(reasons),
        "final_checkpoint": str(result.final_checkpoint),
        "weights_changed_max_abs": changed,
        "seconds_first_run": first,
        "seconds_resumed_run": resumed,
        "imported_packages": imported_packages(),
    }
    failures = []
    if facts["steps"] != list(range(1, STEPS + 1)):
        failures.append(f"metrics hold steps {facts['steps']}, not 1..{STEPS}")
    if not all(isinstance(v, float) and math.isfinite(v) for v in facts["losses"]):
        failures.append(f"a loss is not finite: {facts['losses']}")
    if [s["step"] for s in starts] != [0, STEPS - 1]:
        failures.append(f"expected a start at step 0 and a resume at {STEPS - 1}: {facts['precision']}")
    if not all(s["device"].startswith(device) for s in starts):
        failures.append(f"the update did not run on {device}: {facts['precision']}")
    if not any(v is not None and v < 1 for v in facts["zero_std_group_frac"]):
        failures.append("no group had a reward spread, so nothing was learned from")
    if reasons.keys() & WORKER_FAILURES:
        failures.append(f"the verifier's workers failed: {dict(reasons)}")
    if not changed > 0:
        failures.append("the step-3 weights equal the starting ones")
    if Path(result.final_checkpoint).name != f"step-{STEPS}":
        failures.append(f"the last checkpoint is {result.final_checkpoint}, not step-{STEPS}")
    expected = "cuda-ipc" if device == "cuda" else "shared-memory"  # the generator shares the update's device
    if mode == "async" and transport != expected:
        failures.append(f"the weights crossed through a {transport} bucket, not {expected}")
    bound = config.max_staleness
    if mode == "async" and not all(s is not None and s <= bound for s in facts["staleness_max"]):
        failures.append(f"rollouts staler than max_staleness {bound}: {facts['staleness_max']}")
    if failures:
        raise AssertionError("; ".join(failures) + f" (facts: {json.dumps(facts, default=str)})")
    return facts


def _async_run(config) -> str:
    """The async run to step 2 by the loop's own `Trainer`, what `train` runs in this process, so that the bucket its
    generator process got can be read; returns that bucket's kind."""
    from rlep.tasks.training.loop.steps import Trainer

    trainer = Trainer(config, progress=False)
    try:
        transport = trainer.engine.transport.kind
        trainer.run()
    finally:
        trainer.close()
    return transport
