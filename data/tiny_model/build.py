"""Build (or find cached) the tiny model: tokenizer, Qwen2 LM, supervised training, measurement, atomic save.

A build writes into a temporary directory and renames it into place, so a killed build never leaves a
directory that looks complete; a directory whose `rlep_build.json` has the config's fingerprint is reused.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from contextlib import contextmanager
from pathlib import Path

from rlep.data.problem import DEFAULT_PROMPT_TEMPLATE
from rlep.data.tiny_math import generate
from rlep.data.tiny_model.config import (
    BUILD_INFO_FILE,
    BUILD_VERSION,
    MODEL_FILES,
    TinyModelConfig,
    default_model_dir,
)
from rlep.data.tiny_model.evaluate import cell_accuracy, greedy_accuracy
from rlep.data.tiny_model.training import new_model, supervised_train

# The start is checked on other machines with this set: `rlep eval --source tiny-math --families F --levels L
# --split test --limit 300 --samples 1` draws the same problems.
TARGET_CELL_TEST_PROBLEMS = 300


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
    thread that lost its core). Thread counts and CPUs change the last bits of the floats, so the weights
    differ between machines; the stopping rule (data/tiny_model/training.py) keeps the skill the same.
    """
    import torch

    from rlep.data.tokenizer import save_tokenizer

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
            model = new_model(config, tokenizer)
            losses, stop = supervised_train(model, tokenizer, config, progress=progress)
            train_seconds = time.perf_counter() - started
            test = generate("test", config.eval_problems, seed=0)
            evaluation = greedy_accuracy(model, tokenizer, test, config.answer_tokens)
            target = target_cell_accuracy(model, tokenizer, config)
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
            "bf16_autocast": config.bf16_autocast,
            "stop": {"rule": stop_rule(config), **stop.to_dict()},
            "target_cell": target,
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
    from rlep.data.fs import process_alive

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


def stop_rule(config: TinyModelConfig) -> str:
    """The stopping rule of a build, in words (recorded in rlep_build.json)."""
    if config.stop_cell is None:
        return f"fixed: all {config.steps} steps"
    low, high = config.stop_band
    near = config.stop_aim + (high - config.stop_aim) / 2
    return (
        f"measured: greedy accuracy on {config.check_problems} held-out train problems of {config.stop_cell} "
        f"every {config.check_every} steps; stop at the first check in [{config.stop_aim}, {near:.3g}] "
        f"(band {low}-{high}); a check above {near:.3g} rewinds to the previous check and checks every step; "
        f"at most {config.steps} steps"
    )


def target_cell_accuracy(model, tokenizer, config: TinyModelConfig) -> dict | None:
    """Greedy accuracy on the first 300 TEST problems of the stop cell, and whether it is inside the band."""
    target = config.stop_target()
    if target is None:
        return None
    family, level = target
    problems = generate("test", TARGET_CELL_TEST_PROBLEMS, seed=0, families=[family], levels=[level])
    accuracy = cell_accuracy(model, tokenizer, problems, config.answer_tokens)
    low, high = config.stop_band
    return {
        "cell": config.stop_cell,
        "n": len(problems),
        "accuracy": accuracy,
        "band": [low, high],
        "in_band": low <= accuracy <= high,
    }


def read_build_info(model_dir: Path) -> dict | None:
    """The `rlep_build.json` of a complete build in `model_dir`, or None."""
    model_dir = Path(model_dir)
    if not all((model_dir / name).is_file() for name in MODEL_FILES):
        return None
    try:
        return json.loads((model_dir / BUILD_INFO_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None


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
