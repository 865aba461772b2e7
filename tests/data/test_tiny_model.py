"""The tiny-model build: config validation, training data, caching, and the fixture model end to end.

The fixture config (`TinyModelConfig.fixture()`) builds in seconds; its accuracy is irrelevant here.
The vLLM test is marked slow and runs vLLM in a subprocess with the engine in-process.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError
from transformers import AutoModelForCausalLM, AutoTokenizer

import rlep.data.tiny_model as tiny_model
import rlep.data.tiny_model.build as tiny_build
import rlep.data.tiny_model.evaluate as tiny_evaluate
from rlep.data.problem import render_prompt
from rlep.data.tiny_math import answer_forms, generate
from rlep.data.tiny_model import (
    MODEL_FILES,
    TinyModelConfig,
    build_tiny_model,
    check_problems,
    default_model_dir,
    new_model,
    read_build_info,
    supervised_train,
    target_text,
)
from rlep.data.tiny_model.evaluate import greedy_accuracy
from rlep.data.tokenizer import build_tokenizer

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fixture_config() -> TinyModelConfig:
    return TinyModelConfig.fixture()


@pytest.fixture(scope="module")
def built(tmp_path_factory, fixture_config) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", fixture_config, progress=False)


# ---------------------------------------------------------------------------------------------------
# Config


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("hidden_size", 100),  # not a multiple of the head size 64
        ("hidden_size", 0),
        ("learning_rate", -1.0),
        ("steps", 0),
        ("gold_form_share", 1.5),
        ("mix", {"add": (1.0, 1.0, 1.0), "division": (1.0, 1.0, 1.0)}),
        ("mix", {"add": (1.0, 1.0)}),  # one weight per level
        ("mix", {"add": (1.0, -1.0, 0.0)}),
        ("mix", {"add": (0.0, 0.0, 0.0)}),
        ("unknown_knob", 1),
    ],
)
def test_invalid_config_names_the_field(field, value):
    with pytest.raises(ValidationError) as error:
        TinyModelConfig(**{field: value})
    assert field in str(error.value)


def test_warmup_must_end_before_training_does():
    with pytest.raises(ValidationError, match="warmup_steps"):
        TinyModelConfig(steps=10, warmup_steps=10)


def test_every_field_is_documented():
    for name, field in TinyModelConfig.model_fields.items():
        assert field.description, name


def test_fingerprint_is_stable_and_follows_every_field():
    base = TinyModelConfig()
    assert base.fingerprint() == TinyModelConfig().fingerprint()
    assert base.fingerprint() != TinyModelConfig(seed=1).fingerprint()
    assert base.fingerprint() != TinyModelConfig(mix={"add": (1.0, 0.0, 0.0)}, stop_cell=None).fingerprint()


def test_default_model_dir_honours_rlep_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("RLEP_CACHE_DIR", str(tmp_path))
    config = TinyModelConfig()
    assert default_model_dir(config) == tmp_path / "models" / f"tiny-math-{config.fingerprint()}"
    monkeypatch.delenv("RLEP_CACHE_DIR")
    assert default_model_dir(config).parent == Path.home() / ".cache" / "rlep" / "models"


# ---------------------------------------------------------------------------------------------------
# Training data and scoring


def test_targets_use_the_gold_form_at_the_configured_rate():
    rng = random.Random(0)
    assert {target_text("3/4", rng, 1.0) for _ in range(50)} == {"\\boxed{3/4}"}
    assert {target_text("-7", rng, 0.0) for _ in range(20)} == {"\\boxed{-7}"}  # one form only
    others = {target_text("3/4", rng, 0.0) for _ in range(200)}
    assert others == {f"\\boxed{{{f}}}" for f in answer_forms("3/4")[1:]}


def test_training_batches_are_deterministic_and_mask_the_prompt(fixture_config):
    tokenizer = build_tokenizer()
    first = tiny_model.training_stream(fixture_config, tokenizer)
    assert first == tiny_model.training_stream(fixture_config, tokenizer)
    ids, labels = tiny_model.collate(first[0], tokenizer.pad_token_id)
    example = first[0][0]
    row = labels[0].tolist()
    assert set(row[: example.prompt_len]) == {-100}
    target = tokenizer.decode(row[example.prompt_len : len(example.input_ids)])
    assert target.startswith("\\boxed{") and target.endswith("}</s>")


def test_training_problems_never_come_from_the_test_split(fixture_config):
    test_ids = {p.id for p in generate("test", 5000)}
    pool = tiny_model.training_pool(fixture_config)
    assert not test_ids & {p.id for problems in pool.values() for p in problems}


# ---------------------------------------------------------------------------------------------------
# The stopping rule: measured accuracy on the stop cell, not a step count


@pytest.mark.parametrize(
    ("update", "message"),
    [
        ({"stop_cell": "division/1"}, "stop_cell"),
        ({"stop_cell": "decimal/7"}, "stop_cell"),
        ({"stop_cell": "decimal/1", "mix": {"add": (1.0, 0.0, 0.0)}}, "not trained on"),
        ({"stop_band": (0.3, 0.4), "stop_aim": 0.25}, "stop_band"),
    ],
)
def test_invalid_stop_settings_name_the_field(update, message):
    with pytest.raises(ValidationError, match=message):
        TinyModelConfig(**update)


def test_check_problems_are_held_out_from_training_and_test():
    config = TinyModelConfig()
    probes = check_problems(config)
    assert len(probes) == config.check_problems
    assert {p.data_source for p in probes} == {"tiny-math/decimal"} and {p.level for p in probes} == {1}
    trained = {p.id for problems in tiny_model.training_pool(config).values() for p in problems}
    tested = {p.id for p in generate("test", 300, families=["decimal"], levels=[1])}
    assert not {p.id for p in probes} & (trained | tested)
    assert [p.id for p in check_problems(config)] == [p.id for p in probes]  # deterministic


def _stop_run(config, accuracy_at):
    """Train the fixture model with a scripted cell accuracy; return (weights, losses, record, measured steps)."""
    tokenizer = build_tokenizer()
    seen = []

    def measure(step):
        seen.append(step)
        return accuracy_at(step)

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = new_model(config, tokenizer)
        losses, record = supervised_train(model, tokenizer, config, progress=False, measure=measure)
    return model.state_dict(), losses, record, seen


def test_training_stops_at_the_first_check_that_reaches_the_aim(fixture_config):
    config = fixture_config.model_copy(update={"stop_cell": "decimal/1", "check_every": 10})
    _, losses, record, seen = _stop_run(config, lambda step: {10: 0.05, 20: 0.2}.get(step, 0.3))
    assert seen == [10, 20, 30]
    assert (record.stopped_at, record.reason, record.rewinds) == (30, "aim-reached", 0)
    assert len(losses) == 30 < config.steps
    # No stop cell: every step of the schedule runs.
    _, losses, record, seen = _stop_run(fixture_config, lambda step: 1.0)
    assert (len(losses), record.reason, seen) == (fixture_config.steps, "max-steps", [])


def test_a_check_past_the_band_rewinds_and_replays_the_same_steps(fixture_config):
    config = fixture_config.model_copy(update={"stop_cell": "decimal/1", "check_every": 10})
    # The accuracy jumps from 0 to 0.9 between the checks at steps 20 and 30; it is inside the band at 25-26.
    weights, losses, record, seen = _stop_run(config, lambda step: 0.9 if step >= 27 else 0.3 if step >= 25 else 0.0)
    assert seen == [10, 20, 30, 21, 22, 23, 24, 25]
    assert (record.stopped_at, record.reason, record.rewinds) == (25, "aim-reached", 1)
    # The rewound run is the run that would have stopped at step 25 directly: same weights, same losses.
    direct = config.model_copy(update={"check_every": 1})
    weights_direct, losses_direct, record_direct, _ = _stop_run(direct, lambda step: 0.3 if step >= 25 else 0.0)
    assert record_direct.stopped_at == 25 and record_direct.rewinds == 0
    assert losses == losses_direct
    assert all(torch.equal(weights[name], weights_direct[name]) for name in weights)


def test_a_check_inside_the_band_but_far_past_the_aim_rewinds(fixture_config):
    # aim 0.25 in 0.15-0.35: 0.34 is in the band but more than half-way to its edge (0.30), so it rewinds
    config = fixture_config.model_copy(update={"stop_cell": "decimal/1", "check_every": 10})
    _, _, record, seen = _stop_run(config, lambda step: 0.34 if step >= 24 else 0.26 if step >= 23 else 0.1)
    assert seen == [10, 20, 30, 21, 22, 23]
    assert (record.stopped_at, record.reason, record.rewinds) == (23, "aim-reached", 1)
    _, _, record, seen = _stop_run(config, lambda step: 0.3 if step >= 25 else 0.1)  # 0.30: near enough
    assert (seen, record.stopped_at, record.rewinds) == ([10, 20, 30], 30, 0)


# ---------------------------------------------------------------------------------------------------
# The fixture model, end to end


def test_build_writes_a_complete_model(built, fixture_config):
    for name in MODEL_FILES:
        assert (built / name).is_file(), name
    info = read_build_info(built)
    assert info["fingerprint"] == fixture_config.fingerprint()
    assert info["config"] == fixture_config.model_dump(mode="json")
    assert info["final_loss"] < info["initial_loss"]
    accuracy = info["greedy_accuracy"]
    assert accuracy["n"] == fixture_config.eval_problems
    assert sum(row["n"] for row in accuracy["by_data_source"].values()) == accuracy["n"]
    # The recorded accuracy is that of the saved weights, and the per-source rows add up to it.
    test = generate("test", fixture_config.eval_problems, seed=0)
    model, tokenizer = AutoModelForCausalLM.from_pretrained(built), AutoTokenizer.from_pretrained(built)
    assert accuracy == greedy_accuracy(model, tokenizer, test, fixture_config.answer_tokens)
    right = sum(row["n"] * row["accuracy"] for row in accuracy["by_data_source"].values())
    assert accuracy["overall"] == pytest.approx(right / accuracy["n"])
    assert not [p for p in built.parent.iterdir() if p.name.startswith(".")]  # no temp dirs left


def test_greedy_accuracy_counts_the_verifiers_verdicts(monkeypatch):
    # Responses chosen per problem: right (two spellings), wrong, or no answer; the verifier is the real one.
    problems = generate("test", 8, seed=0, families=["add", "frac"], levels=[1])
    responses = [
        f"\\boxed{{{p.answer}}}"
        if i % 4 == 0
        else f"The answer is \\boxed{{{p.answer}}}."
        if i % 4 == 1
        else "\\boxed{-123456}"
        if i % 4 == 2
        else ""
        for i, p in enumerate(problems)
    ]
    monkeypatch.setattr(tiny_evaluate, "greedy_responses", lambda model, tokenizer, chosen, *a: responses)
    accuracy = greedy_accuracy(None, None, problems)
    by_source = {}
    for i, p in enumerate(problems):
        by_source.setdefault(p.data_source, []).append(i % 4 < 2)
    assert accuracy["overall"] == 0.5 and accuracy["n"] == 8
    assert {k: (v["n"], v["accuracy"]) for k, v in accuracy["by_data_source"].items()} == {
        k: (len(v), sum(v) / len(v)) for k, v in by_source.items()
    }
    assert len(by_source) == 2 and [e["response"] for e in accuracy["examples"]] == responses


def test_training_changed_every_parameter(built, fixture_config):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(fixture_config.seed)
        initial = new_model(fixture_config, build_tokenizer())
    trained = AutoModelForCausalLM.from_pretrained(built)
    before = dict(initial.named_parameters())
    for name, parameter in trained.named_parameters():
        assert not torch.equal(parameter, before[name]), f"{name} did not change"


def test_model_loads_in_transformers_and_stops_at_eos(built):
    tokenizer = AutoTokenizer.from_pretrained(built)
    model = AutoModelForCausalLM.from_pretrained(built)
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id
    assert model.generation_config.pad_token_id == tokenizer.pad_token_id
    prompts = [render_prompt(p) for p in generate("test", 4)]
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    out = model.generate(**batch, max_new_tokens=24, do_sample=False)
    completions = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    assert all(c.startswith("\\boxed{") for c in completions), completions
    assert (out == tokenizer.eos_token_id).any(dim=1).all()


def test_second_build_reuses_the_cache_and_force_rebuilds(built, fixture_config, monkeypatch):
    stamp = (built / "model.safetensors").stat().st_mtime_ns
    calls = []
    train = tiny_build.supervised_train
    monkeypatch.setattr(tiny_build, "supervised_train", lambda *a, **k: calls.append(1) or train(*a, **k))
    assert build_tiny_model(built, fixture_config, progress=False) == built
    assert calls == [] and (built / "model.safetensors").stat().st_mtime_ns == stamp
    assert build_tiny_model(built, fixture_config, force=True, progress=False) == built
    assert calls == [1] and read_build_info(built)["fingerprint"] == fixture_config.fingerprint()


def test_a_build_removes_temp_dirs_left_by_killed_builds(tmp_path, fixture_config):
    stale = tmp_path / ".model.tmp-999999999"  # no such process
    (stale / "config.json").parent.mkdir()
    (stale / "config.json").write_text("{}")
    build_tiny_model(tmp_path / "model", fixture_config, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_a_different_config_in_the_same_directory_rebuilds(tmp_path, fixture_config):
    target = tmp_path / "model"
    build_tiny_model(target, fixture_config, progress=False)
    other = fixture_config.model_copy(update={"seed": 1})
    build_tiny_model(target, other, progress=False)
    assert read_build_info(target)["fingerprint"] == other.fingerprint()


def test_a_failed_build_leaves_nothing_that_looks_complete(tmp_path, fixture_config, monkeypatch):
    def crash(*args, **kwargs):
        raise RuntimeError("killed")

    monkeypatch.setattr(tiny_build, "greedy_accuracy", crash)
    with pytest.raises(RuntimeError, match="killed"):
        build_tiny_model(tmp_path / "model", fixture_config, progress=False)
    assert list(tmp_path.iterdir()) == []


VLLM_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from vllm import LLM, SamplingParams
    llm = LLM(model=sys.argv[1], dtype="float32", max_model_len=256, enforce_eager=True, seed=0)
    prompts = json.loads(sys.argv[2])
    outputs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=24))
    print("RESULT " + json.dumps([[o.outputs[0].text, o.outputs[0].finish_reason] for o in outputs]))
    """
)


@pytest.mark.slow
def test_model_loads_in_vllm_and_matches_transformers_greedy(built):
    prompts = [render_prompt(p) for p in generate("test", 6)]
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}
    run = subprocess.run(
        [sys.executable, "-c", VLLM_SCRIPT, str(built), json.dumps(prompts)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    line = next(line for line in run.stdout.splitlines() if line.startswith("RESULT "))
    vllm_outputs = json.loads(line.removeprefix("RESULT "))
    assert all(reason == "stop" for _, reason in vllm_outputs), vllm_outputs

    tokenizer = AutoTokenizer.from_pretrained(built)
    model = AutoModelForCausalLM.from_pretrained(built)
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    out = model.generate(**batch, max_new_tokens=24, do_sample=False)
    expected = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    assert [text for text, _ in vllm_outputs] == expected
