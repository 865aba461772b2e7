"""A verl training file collected from: rlep reads the exact replica (built as verl's gsm8k.py builds it), samples
and verifies answers to its rows, builds the pool, and exports back into the same file, which verl's
RLHFDataset reads alongside the original (unsolved rows kept, the file's own types and keys)."""

import datasets
import pyarrow.parquet as pq
from source_replicas import GSM8K_ROWS, write_verl_gsm8k

from rlep.data.pool import build_pool
from rlep.data.rlep_format import export_pool
from rlep.data.store import ExperienceStore
from rlep.tasks.collect import run_collection
from rlep.tasks.engines.cache import release_engines
from rlep.tasks.settings.collect import CollectConfig


def test_a_verl_gsm8k_file_is_collected_from_and_exported_back_into(fixture_model, tmp_path):
    train = write_verl_gsm8k(tmp_path / "gsm8k" / "train.parquet", "train")
    # GSM8K questions run to ~270 characters (tokens, for the character-level fixture): a context of 512 leaves
    # room (the transformers engine has no fixed context; the prompt length check would refuse 256).

    config = CollectConfig.model_validate(
        {
            "model": fixture_model,
            "problems": {"source": str(train)},
            "samples_per_prompt": 2,
            "sampling": {"max_tokens": 8},
            "min_correct": 1,
            "out": str(tmp_path / "run"),
            "engine": {"backend": "transformers", "max_model_len": 512},
        }
    )
    try:
        run_collection(config, progress=False)
    finally:
        release_engines()
    rows = pq.read_table(tmp_path / "run" / "trajectories").to_pylist()
    assert len(rows) == 2 * len(GSM8K_ROWS)
    by_id = {r["problem_id"]: r for r in rows}
    assert sorted(by_id) == [str(i) for i in range(len(GSM8K_ROWS))]  # verl's extra_info.index
    for index, (question, _, gold) in enumerate(GSM8K_ROWS):
        row = by_id[str(index)]
        assert row["data_source"] == "openai/gsm8k" and row["gold_answer"] == gold  # commas stripped as verl does
        assert question in row["problem"] and question in row["prompt"]  # the last user message, not a repr
    # The tiny fixture model answers nothing right: build a pool over one row's gold answer, as a solved problem.
    store = ExperienceStore(tmp_path / "run")
    first = next(r for r in rows if r["problem_id"] == "0")
    solved = {
        **first,
        "response": f"\\boxed{{{first['gold_answer']}}}",
        "correct": True,
        "reward": 1.0,
        "sample_index": 9,
    }
    store.write_shard(99, [solved])
    build_pool(store, min_correct=1)
    report = export_pool(store.pool_path, tmp_path / "with-pool.parquet", into=train)
    exported = pq.read_table(report.path)
    assert exported.schema.field("extra_info").type == pq.read_table(train).schema.field("extra_info").type
    assert [r["reward_model"]["candidates"] for r in exported.to_pylist()] == [[solved["response"]]] + [[]] * (
        len(GSM8K_ROWS) - 1
    )
    cache = str(tmp_path / "hf-cache")
    both = datasets.concatenate_datasets(
        [datasets.load_dataset("parquet", data_files=str(f), cache_dir=cache)["train"] for f in (train, report.path)]
    )
    assert len(both) == 2 * len(GSM8K_ROWS)
