"""The whole pipeline on the real model, SmolLM2-135M-Instruct, where it has been fetched (`rlep real-model`):
collect with vLLM under its chat template, then one RLEP training step replaying that pool, with the weights
synced into the engine. Skips with its reason where the model is not in the cache (no 98 MB download here)."""

import pyarrow.parquet as pq
import pytest

from rlep.tasks.real_model import SMOLLM2, is_converted, model_dir

SMOL = model_dir(SMOLLM2)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not is_converted(SMOL, SMOLLM2), reason=f"SmolLM2 not converted at {SMOL}: run `rlep real-model` first"
    ),
]

TASK = {"source": "tiny-math", "families": ["add"], "levels": [2], "split": "train", "limit": 4}
ENGINE = {"backend": "vllm", "dtype": "float32", "max_model_len": 192, "max_num_seqs": 32, "kv_cache_gib": 1}


def test_smollm2_collects_and_trains_a_replay_step_under_its_chat_template(tmp_path):
    from rlep.tasks.collect import run_collection
    from rlep.tasks.engines.cache import release_engines
    from rlep.tasks.settings.collect import CollectConfig
    from rlep.tasks.settings.train import TrainConfig
    from rlep.tasks.training.backends.precision import recorded_precision, resolve_precision
    from rlep.tasks.training.trainer import train

    collect = CollectConfig.model_validate(
        {
            "model": "smollm2",
            "problems": TASK,
            "samples_per_prompt": 4,
            "sampling": {"max_tokens": 32, "temperature": 0.7},
            "min_correct": 1,
            "out": str(tmp_path / "collect"),
            "engine": ENGINE,
        }
    )
    try:
        result = run_collection(collect, progress=False)
    finally:
        release_engines()
    rows = pq.read_table(tmp_path / "collect" / "trajectories").to_pylist()
    assert len(rows) == 16 and all(r["prompt"].startswith("<|im_start|>system") for r in rows)  # ChatML, rendered once
    assert rows[0]["prompt"].rstrip().endswith("<|im_start|>assistant")
    pooled = result["pool"]["pool_rows"]
    replay = {"kind": "rlep", "pool": str(tmp_path / "collect")} if pooled else {"kind": "none"}
    config = TrainConfig.model_validate(
        {
            "model": "smollm2",
            "problems": TASK,
            "eval_problems": {**TASK, "split": "test", "limit": 2},
            "replay": replay,
            "steps": 1,
            "prompts_per_step": 2,
            "samples_per_prompt": 2,
            "sampling": {"max_tokens": 32, "temperature": 0.7},
            "mini_batch_prompts": 1,
            "micro_batch_size": 4,
            "eval_every": 0,
            "save_every": 1,
            "engine": ENGINE,
            "optimizer": {"lr": 1e-6},
            "backend": {"precision": "auto"},  # bf16 where this CPU computes it natively, float32 elsewhere
            "out": str(tmp_path / "train"),
        }
    )
    trained = train(config, progress=False)
    metrics = pq.read_table(trained.metrics_path).to_pylist()[0]
    assert metrics["optimizer_updates"] == 2 and metrics["tokens_trained"] > 0
    assert metrics["logprob_mismatch"] < 0.05  # vLLM's sampler and the torch model agree on the sampled tokens
    assert metrics["time_sync"] > 0 and (trained.final_checkpoint / "model.safetensors").is_file()
    # auto resolved once, the way this machine's CPU decides it, and recorded beside the settings (which keep auto)
    [start] = recorded_precision(tmp_path / "train")
    assert start["setting"] == "auto" and start["precision"] == resolve_precision("auto", "cpu").precision
    print(
        f"SmolLM2 step ({start['precision']}): {metrics['time_step']:.1f} s, sync {metrics['time_sync']:.2f} s "
        f"({metrics['time_sync'] / metrics['time_step']:.1%}), replay rows {pooled}"
    )
