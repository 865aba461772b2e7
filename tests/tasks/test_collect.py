"""Phase I collection through its real code path: schema, pool rule, dedup, resume after SIGKILL, bad input."""

import json
import os
import signal
import subprocess
import sys
import time
import zlib

import pandas as pd
import pyarrow.parquet as pq
import pytest

from rlep.data.pool import build_pool
from rlep.data.store import ExperienceStore, StoreError
from rlep.data.trajectory import COLUMNS, ROW_KEY
from rlep.tasks.collect import run_collection
from rlep.tasks.engines.cache import release_engines
from rlep.tasks.settings.collect import CollectConfig
from rlep.verifiers import verify_batch

REQUIRED = [
    "run_id",
    "problem_id",
    "data_source",
    "prompt",
    "response",
    "response_token_ids",
    "behaviour_logprobs",
    "extracted_answer",
    "gold_answer",
    "correct",
    "verdict_reason",
    "reward",
    "policy_version",
    "model",
    "sampling",
    "created_at",
]


def _config(model, out, **kw):
    settings = dict(
        model=model,
        out=str(out),
        samples_per_prompt=4,
        min_correct=1,
        shard_size=5,
        sampling={"max_tokens": 12},
        problems={"source": "tiny-math", "split": "train", "limit": 12},
        engine={"backend": "transformers"},
    )
    settings.update(kw)
    return CollectConfig.model_validate(settings)


def _gold_answers(gold, prompt):
    """Right answers the collection gets (the fixture model gets none): every problem's first sample is its
    boxed gold answer and its second the same answer laid out differently (a duplicate for the pool rule);
    every other problem (by a stable hash of its prompt) gets a third, distinct right answer. The fourth
    sample is the model's own."""
    answers = [f"\\boxed{{{gold}}}", f"  \\boxed{{{gold}}}\n"]
    if zlib.crc32(prompt.encode()) % 2:
        answers.append(f"The answer is \\boxed{{{gold}}}.")
    return answers


@pytest.fixture(scope="module")
def collected(fixture_model, tmp_path_factory, gold_answers):
    out = tmp_path_factory.mktemp("collect") / "run-a"
    try:
        with pytest.MonkeyPatch.context() as patch:
            gold_answers(patch, _gold_answers)
            result = run_collection(_config(fixture_model, out), progress=False)
    finally:
        release_engines()
    return out, result


def test_outputs_and_schema(collected):
    out, result = collected
    shards = sorted((out / "trajectories").glob("part-*.parquet"))
    assert [p.name for p in shards] == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    table = pq.read_table(out / "trajectories")
    assert table.column_names[: len(REQUIRED)] == REQUIRED and set(COLUMNS) == set(table.column_names)
    assert table.num_rows == 12 * 4 == result["pool"]["samples"]
    df = table.to_pandas()
    assert set(df.run_id) == {"run-a"} and set(df.policy_version) == {0}
    assert (df.response_token_ids.map(len) == df.behaviour_logprobs.map(len)).all()
    assert json.loads(df.sampling.iloc[0])["n"] == 4
    gold = df.sample_index < df.prompt.map(lambda p: len(_gold_answers("0", p)))
    assert gold.sum() == 12 * 2 + sum(zlib.crc32(p.encode()) % 2 for p in set(df.prompt))
    assert (df[gold].verdict_reason == "equal").all() and df[gold].correct.all()
    own = df[~gold]  # the model's answers: the verdicts the verifier gives them when asked directly
    assert own.verdict_reason.tolist() == [
        v.reason for v in verify_batch(own.response.tolist(), own.gold_answer.tolist())
    ]
    assert (df.reward == df.correct.astype(float)).all()
    assert not (out / ".staging").exists()  # each shard's staging file went once verified, then the folder


def test_readers_pandas_and_datasets(collected, tmp_path, monkeypatch):
    out, _ = collected
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    import datasets

    files = sorted(str(p) for p in (out / "trajectories").glob("part-*.parquet"))
    ds = datasets.load_dataset("parquet", data_files=files, split="train")
    assert ds.num_rows == 48 and "behaviour_logprobs" in ds.column_names
    assert len(pd.read_parquet(out / "pool.parquet").columns) == len(COLUMNS)


def test_manifest(collected):
    out, _ = collected
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["samples"] == 48 and manifest["counts"]["shards"] == 3
    assert manifest["model"]["weights_hash"].startswith("sha256:")
    assert manifest["parameters"]["samples_per_prompt"] == 4
    assert {"generate", "verify", "write", "total", "engine_start"} <= set(manifest["timings"])
    assert sum(f["rows"] for name, f in manifest["files"].items() if name.startswith("trajectories/")) == 48


def _distinct_correct(df):
    """Per problem, its distinct right answers as the pool rule compares them (layout aside), first seen first."""
    right = df[df.correct].sort_values(["problem_id", "sample_index"])
    return {
        pid: list(dict.fromkeys(" ".join(r.split()) for r in rows.response))
        for pid, rows in right.groupby("problem_id")
    }


def test_pool_rule_and_dedup(collected, tmp_path):
    out, result = collected
    df = pq.read_table(out / "trajectories").to_pandas()
    distinct = _distinct_correct(df)
    counts = df[df.correct].groupby("problem_id").size()
    assert len(distinct) == 12 and counts.min() >= 2  # every problem has right answers, all of them repeated
    pool = pd.read_parquet(out / "pool.parquet")
    assert pool.correct.all() and (pool.reward == 1.0).all()
    assert len(pool) == int(counts.sum()) and result["pool"]["duplicates"] == 0  # RLEP's pool: every right answer
    store = ExperienceStore(out, run_id="run-a")
    result = {"pool": build_pool(store, min_correct=1, dedupe=True).to_dict()}
    pool = pd.read_parquet(out / "pool.parquet")
    # dedupe: each distinct right answer once; the second gold sample differs only in layout and is dropped.
    assert {pid: [" ".join(r.split()) for r in rows.response] for pid, rows in pool.groupby("problem_id")} == distinct
    assert len(pool) == sum(map(len, distinct.values())) and len(pool) > 12
    assert not pool.response.str.startswith(" ").any()  # the first spelling is the one kept
    stats = result["pool"]
    assert (stats["pool_rows"], stats["duplicates"], stats["pool_problems"]) == (
        len(pool),
        int(counts.sum()) - len(pool),
        12,
    )
    # A stricter threshold: only problems with >= 3 right samples (those given a third answer) remain.
    stats = build_pool(store, min_correct=3, dedupe=True)
    kept = set(counts[counts >= 3].index)
    assert 0 < len(kept) < 12 and stats.pool_problems == len(kept)
    assert set(pd.read_parquet(out / "pool.parquet").problem_id) == kept
    assert stats.below_min_correct == sum(len(v) for pid, v in distinct.items() if pid not in kept)
    build_pool(store, min_correct=1)


def test_bad_inputs_fail_before_any_work(fixture_model, tmp_path):
    with pytest.raises(ValueError, match=r"min_correct \(5\) > samples_per_prompt \(4\)"):
        _config(fixture_model, tmp_path / "x", min_correct=5)
    with pytest.raises(Exception, match="unknown problem source"):
        run_collection(_config(fixture_model, tmp_path / "y", problems={"source": "nope"}), progress=False)
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    with pytest.raises(StoreError, match="not writable"):
        run_collection(_config(fixture_model, blocked / "out"), progress=False)
    assert not (tmp_path / "y").exists()


def test_rerun_reuses_shards_only_of_the_same_collection(collected, fixture_model):
    out, _ = collected
    shard_times = {p.name: p.stat().st_mtime_ns for p in (out / "trajectories").iterdir()}
    try:
        again = run_collection(_config(fixture_model, out, min_correct=2), progress=False)  # pool cut only: allowed
    finally:
        release_engines()
    assert again["skipped_shards"] == 3
    assert {p.name: p.stat().st_mtime_ns for p in (out / "trajectories").iterdir()} == shard_times
    with pytest.raises(StoreError, match=r"different collection \(changed: problems, samples_per_prompt\)"):
        run_collection(
            _config(
                fixture_model, out, samples_per_prompt=3, problems={"source": "tiny-math", "limit": 12, "levels": [1]}
            ),
            progress=False,
        )
    assert {p.name: p.stat().st_mtime_ns for p in (out / "trajectories").iterdir()} == shard_times


def _cli(args, **kw):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "rlep.flows.cli", *args],
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kw,
    )


@pytest.mark.slow
def test_resume_after_sigkill(fixture_model, tmp_path):
    out = tmp_path / "killed"
    args = [
        "collect",
        "--no-prefect",
        "--model",
        fixture_model,
        "--engine",
        "transformers",
        "--limit",
        "40",
        "--shard-size",
        "4",
        "--samples-per-prompt",
        "3",
        "--min-correct",
        "1",
        "--max-tokens",
        "12",
        "--out",
        str(out),
    ]
    proc = _cli(args)
    deadline = time.time() + 240
    while len(list((out / "trajectories").glob("part-*.parquet"))) < 3:
        assert proc.poll() is None, proc.stdout.read()
        assert time.time() < deadline, "collection made no progress"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = {p.name for p in (out / "trajectories").glob("part-*.parquet")}
    assert 3 <= len(before) < 10
    finished = _cli(args)
    output, _ = finished.communicate(timeout=300)
    assert finished.returncode == 0, output
    assert f"{len(before)} already done" in output
    table = pq.read_table(out / "trajectories")
    assert table.num_rows == 40 * 3
    keys = table.select(list(ROW_KEY)).to_pandas()
    assert not keys.duplicated().any()
    assert sorted(p.name for p in (out / "trajectories").iterdir()) == [f"part-{i:05d}.parquet" for i in range(10)]
    assert json.loads((out / "manifest.json").read_text())["counts"]["samples"] == 120


def test_cli_bad_input_exit_code_and_nothing_written(tmp_path):
    proc = _cli(["collect", "--no-prefect", "--source", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "o")])
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "missing.jsonl: no such file" in output
    assert not (tmp_path / "o").exists()


def test_missing_model_leaves_no_directory(tmp_path):
    from rlep.tasks.models import ModelNotFound

    with pytest.raises(ModelNotFound):
        run_collection(_config(str(tmp_path / "no-such-model"), tmp_path / "out"), progress=False)
    assert not (tmp_path / "out").exists()


def test_a_second_collection_into_one_directory_refuses_and_a_stale_lock_is_taken_over(collected, fixture_model):
    out, _ = collected
    shard_times = {p.name: p.stat().st_mtime_ns for p in (out / "trajectories").iterdir()}
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (out / "collect.lock").write_text(str(other.pid))
        with pytest.raises(StoreError, match=rf"being collected into by process {other.pid} \(lock .*collect.lock\)"):
            run_collection(_config(fixture_model, out), progress=False)
        assert (out / "collect.lock").read_text() == str(other.pid)  # the live holder keeps its lock
    finally:
        other.kill()
        other.wait()
    try:  # the holder is dead now: its lock is stale and taken over
        again = run_collection(_config(fixture_model, out), progress=False)
    finally:
        release_engines()
    assert again["skipped_shards"] == 3 and not (out / "collect.lock").exists()
    assert {p.name: p.stat().st_mtime_ns for p in (out / "trajectories").iterdir()} == shard_times


def test_a_truncated_part_is_named_by_resume_and_inspect(collected, fixture_model, tmp_path, capsys):
    import shutil

    from rlep.flows.cli import main

    out = tmp_path / "run-a"  # the same run id as the original
    shutil.copytree(collected[0], out)
    part = out / "trajectories" / "part-00001.parquet"
    part.write_bytes(part.read_bytes()[:100])  # cut short, as by a full disk
    with pytest.raises(
        StoreError, match=r"part-00001.parquet: unreadable Parquet part .*delete it and run the same command again"
    ):
        run_collection(_config(fixture_model, out), progress=False)
    assert not (out / "collect.lock").exists()
    assert main(["inspect", str(out)]) == 2
    assert "part-00001.parquet: unreadable Parquet file" in capsys.readouterr().err
    part.unlink()  # as the message says: the shard is collected anew
    try:
        again = run_collection(_config(fixture_model, out), progress=False)
    finally:
        release_engines()
    assert again["skipped_shards"] == 2 and again["pool"]["samples"] == 48


def test_a_failed_part_write_is_named_leaves_nothing_partial_and_resumes(fixture_model, tmp_path, monkeypatch):
    import errno

    import rlep.data.fs as fs_module

    real_write = fs_module.pq.write_table

    def disk_full(table, where, *args, **kwargs):  # fails inside the writer, after some bytes are out
        if "part-00001" in str(where) and "trajectories" in str(where):
            with open(where, "wb") as f:
                f.write(b"PAR1 partial")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(table, where, *args, **kwargs)

    out = tmp_path / "run-a"
    monkeypatch.setattr(fs_module.pq, "write_table", disk_full)
    try:
        with pytest.raises(
            StoreError, match=r"part-00001.parquet: not written \(No space left on device\); nothing partial"
        ):
            run_collection(_config(fixture_model, out), progress=False)
        assert sorted(p.name for p in (out / "trajectories").iterdir()) == ["part-00000.parquet"]
        monkeypatch.setattr(fs_module.pq, "write_table", real_write)
        again = run_collection(_config(fixture_model, out), progress=False)
    finally:
        release_engines()
    assert again["skipped_shards"] == 1 and again["pool"]["samples"] == 48
    assert sorted(p.name for p in (out / "trajectories").iterdir()) == [f"part-0000{i}.parquet" for i in range(3)]


def test_a_chat_models_prompts_are_rendered_by_its_chat_template_and_stored(chat_model, fixture_model, tmp_path):
    from transformers import AutoTokenizer

    from rlep.data.problem import render_prompt
    from rlep.data.prompting import PromptError
    from rlep.data.sources import load_problems
    from rlep.tasks.settings.source import problem_source

    tokenizer = AutoTokenizer.from_pretrained(chat_model)
    problems = load_problems(problem_source(source="tiny-math", split="train", limit=3))
    template = "{problem} Put the final answer in \\boxed{{}}."
    try:
        for mode, expected in (
            ("auto", [render_prompt(p, template, tokenizer) for p in problems]),
            ("off", [template.format(problem=p.problem) for p in problems]),
        ):
            out = tmp_path / mode
            run_collection(
                _config(
                    chat_model,
                    out,
                    samples_per_prompt=2,
                    sampling={"max_tokens": 4},
                    problems={"source": "tiny-math", "limit": 3},
                    prompt_template=template,
                    chat_template=mode,
                ),
                progress=False,
            )
            rows = ExperienceStore(out).read_trajectories().to_pylist()
            assert [r["prompt"] for r in rows[::2]] == expected
            # What the engine was given is what is stored, token for token (the trainer encodes the same way).
            assert all(
                r["prompt_token_ids"] == tokenizer(r["prompt"], add_special_tokens=False).input_ids for r in rows
            )
    finally:
        release_engines()
    with pytest.raises(PromptError, match="has no chat template"):
        run_collection(_config(fixture_model, tmp_path / "on", chat_template="on"), progress=False)
    assert not (tmp_path / "on").exists()  # refused before the run directory is made


def test_overlong_prompts_are_refused_before_anything_is_written_or_left_out(fixture_model, tmp_path):
    from transformers import AutoTokenizer

    from rlep.data.problem import render_prompt
    from rlep.data.prompt_length import PromptTooLongError
    from rlep.data.sources import load_problems
    from rlep.tasks.collect_preflight import plan_shards, preflight

    config = _config(fixture_model, tmp_path / "refused")
    tokenizer = AutoTokenizer.from_pretrained(fixture_model)
    lengths = sorted(
        len(tokenizer(render_prompt(p), add_special_tokens=False).input_ids) for p in load_problems(config.problems)
    )
    assert lengths[0] < lengths[-1]  # tiny-math prompts differ in length: a context between them splits them
    middle = lengths[len(lengths) // 2] + 12  # room for the shorter half with 12 new tokens
    engine = {"backend": "transformers", "max_model_len": middle}
    with pytest.raises(PromptTooLongError, match=f"max_model_len {middle} - max new tokens 12"):
        preflight(_config(fixture_model, tmp_path / "refused", engine=engine))
    assert not (tmp_path / "refused").exists()  # refused before the run directory is made
    filtered = _config(fixture_model, tmp_path / "f", engine=engine, prompt_length={"overlong_prompts": "filter"})
    kept = sum(map(len, plan_shards(filtered, fixture_model).shards))
    assert kept == sum(n <= lengths[len(lengths) // 2] for n in lengths) and 0 < kept < 12
    roomy = _config(fixture_model, tmp_path / "f", engine={**engine, "max_model_len": lengths[-1] + 12})
    assert sum(map(len, plan_shards(roomy, fixture_model).shards)) == 12


def test_a_max_model_len_above_the_models_positions_is_one_line_before_anything_is_written(fixture_model, tmp_path):
    # The prompt-length error's old advice ("raise the engine's max_model_len") led here: vLLM refused 512 for
    # the 256 positions of the model in a 39-line traceback, after the run directory and its log were made.
    out = tmp_path / "o"
    args = ["collect", "--no-prefect", "--model", fixture_model, "--max-model-len", "512", "--out", str(out)]
    proc = _cli([*args, "--engine", "vllm", "--limit", "2"])
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 2, output
    assert output.strip().splitlines() == [
        "rlep collect: error: max_model_len 512 is above the model's limit of 256 tokens (max_position_embeddings in "
        "its config.json): set the engine's max_model_len to 256 or less"
    ]
    assert not out.exists()


@pytest.mark.parametrize("command", ["train", "eval"])
def test_train_and_eval_refuse_a_max_model_len_above_the_models_positions_in_one_line(command, fixture_model, tmp_path):
    # The same refusal as collect's: before, both started vLLM and ended in its traceback.
    out = tmp_path / "o"
    proc = _cli(
        [
            command,
            "--no-prefect",
            "--model",
            fixture_model,
            "--max-model-len",
            "512",
            "--engine",
            "vllm",
            "--out",
            str(out),
        ]
    )
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 2, output
    assert output.strip().splitlines() == [
        f"rlep {command}: error: max_model_len 512 is above the model's limit of 256 tokens (max_position_embeddings "
        "in its config.json): set the engine's max_model_len to 256 or less"
    ]
    assert not out.exists()


def test_rows_left_out_are_counted_on_the_terminal_and_in_the_manifest(fixture_model, tmp_path):
    # Before, the counts reached only rlep.log: the terminal said fewer answers than asked for, without why.
    rows = [
        {"problem": "1+1", "answer": "2"},
        {"problem": "2+2", "answer": ""},  # no gold answer: skipped with --invalid-rows skip
        {"problem": "+".join(["1"] * 80), "answer": "80"},  # too long for 128 tokens with 12 new ones: filtered
        {"problem": "3+4", "answer": "7"},
    ]
    source = tmp_path / "problems.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "o"
    settings = ["--source", str(source), "--invalid-rows", "skip", "--overlong-prompts", "filter"]
    sizes = ["--max-model-len", "128", "--max-tokens", "12", "--samples-per-prompt", "2", "--min-correct", "1"]
    args = ["collect", "--no-prefect", "--model", fixture_model, "--engine", "transformers", "--out", str(out)]
    proc = _cli([*args, *settings, *sizes])
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, output
    assert "answers: 4," in output and "left out: empty answer 1, prompt too long 1" in output.splitlines()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["left_out"] == {"empty answer": 1, "prompt too long": 1}
    assert manifest["counts"]["problems"] == 2


def test_a_split_for_a_file_without_a_split_column_is_refused_in_one_line(tmp_path):
    source = tmp_path / "problems.jsonl"
    source.write_text(json.dumps({"problem": "1+1", "answer": "2"}) + "\n")
    out = tmp_path / "o"
    proc = _cli(["collect", "--no-prefect", "--source", str(source), "--split", "train", "--out", str(out)])
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2, output
    assert output.strip().splitlines() == [
        f"rlep collect: error: invalid configuration: problems.split: {source} has no split column (split or "
        "extra_info.split) to choose rows by; a file without one is read whole (drop the split, or name the column "
        "with split_column)"
    ]
    assert not out.exists()
