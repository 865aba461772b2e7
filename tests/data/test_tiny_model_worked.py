"""The worked-solutions tiny model (`solutions: worked`): its data, a fixture-sized build that stops in its
band by measurement, and a pool on it that holds more than one distinct correct answer per problem."""

from __future__ import annotations

from collections import defaultdict

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlep.data.problem import render_prompt
from rlep.data.tiny_math import generate
from rlep.data.tiny_math_worked import step_errors
from rlep.data.tiny_model import TinyModelConfig, build_tiny_model, read_build_info, training_stream
from rlep.data.tiny_model.config import WORKED_MAX_NEW_TOKENS
from rlep.data.tokenizer import build_tokenizer
from rlep.verifiers import verify_batch

# Single-digit addition, 40 problems trained, 50 held out for the checks: stops at the first check at or
# above 0.2 (about step 250 of 300 on a 2-core CPU, ~15 s); band 0.1-0.5.
FIXTURE = dict(
    hidden_size=64,
    num_layers=1,
    intermediate_size=128,
    batch_size=16,
    learning_rate=6e-3,
    warmup_steps=10,
    steps=300,
    mix={"add": (1.0, 0.0, 0.0)},
    train_problems=40,
    solutions="worked",
    stop_cell="add/1",
    stop_band=(0.1, 0.5),
    stop_aim=0.2,
    check_every=20,
    check_problems=50,
    eval_problems=0,
    eval_max_new_tokens=24,
)


@pytest.fixture(scope="module")
def worked_build(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny-worked") / "model"
    build_tiny_model(out, TinyModelConfig(**FIXTURE), progress=False, threads=1)
    return out


def test_worked_config_gets_a_longer_answer_budget_and_its_own_cache():
    assert TinyModelConfig.worked().answer_tokens == WORKED_MAX_NEW_TOKENS
    assert TinyModelConfig(solutions="worked", eval_max_new_tokens=64).answer_tokens == 64
    assert TinyModelConfig().answer_tokens == 32
    # as `rlep tiny-model --solutions worked` builds it (flags merged onto the defaults)
    from rlep.flows.cli import build_parser
    from rlep.flows.options import build_config, flag_overrides

    args = build_parser().parse_args(["tiny-model", "--solutions", "worked"])
    config = build_config(TinyModelConfig, None, flag_overrides(args))
    assert config == TinyModelConfig.worked() and config.answer_tokens == WORKED_MAX_NEW_TOKENS
    assert TinyModelConfig.worked().fingerprint() != TinyModelConfig().fingerprint()


def test_worked_training_targets_are_right_steps_in_several_styles():
    tokenizer = build_tokenizer()
    config = TinyModelConfig(**{**FIXTURE, "steps": 20})
    targets = [
        tokenizer.decode(e.input_ids[e.prompt_len :]).removesuffix(tokenizer.eos_token)
        for batch in training_stream(config, tokenizer)
        for e in batch
    ]
    assert all(step_errors(t) == [] for t in targets)
    assert all("\n" in t and t.rpartition("\n")[2].startswith("\\boxed{") for t in targets)
    assert sum(t.startswith("ones: ") for t in targets) > 0.2 * len(targets)  # column style
    assert sum("=" in t.partition("\n")[0] and not t.startswith("ones") for t in targets) > 0.2 * len(targets)
    bare = training_stream(TinyModelConfig(**{**FIXTURE, "steps": 20, "solutions": "bare"}), tokenizer)
    assert all("\n" not in tokenizer.decode(e.input_ids[e.prompt_len :]) for batch in bare for e in batch)


def test_fixture_worked_build_stops_inside_its_band(worked_build):
    info = read_build_info(worked_build)
    stop = info["stop"]
    assert stop["reason"] == "aim-reached", stop
    step, accuracy = stop["checks"][-1]
    assert step == stop["stopped_at_step"] < FIXTURE["steps"]
    assert FIXTURE["stop_aim"] <= accuracy <= FIXTURE["stop_band"][1]
    assert all(a < FIXTURE["stop_aim"] for _, a in stop["checks"][:-1])
    assert stop["rule"].startswith("measured: greedy accuracy on 50 held-out train problems of add/1 every 20")
    assert "[0.2, 0.35]" in stop["rule"]


def test_a_pool_sampled_from_it_holds_several_distinct_correct_answers(worked_build):
    tokenizer = AutoTokenizer.from_pretrained(worked_build)
    model = AutoModelForCausalLM.from_pretrained(worked_build)
    problems = generate("train", 30, seed=0, families=["add"], levels=[1])
    torch.manual_seed(0)
    enc = tokenizer([render_prompt(p) for p in problems], return_tensors="pt", padding=True, padding_side="left")
    with torch.inference_mode():
        out = model.generate(**enc, max_new_tokens=40, do_sample=True, temperature=1.0, num_return_sequences=8)
    responses = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    golds = [p.answer for p in problems for _ in range(8)]
    correct = defaultdict(set)  # the pool keeps distinct verified answers per problem
    for i, (response, verdict) in enumerate(zip(responses, verify_batch(responses, golds))):
        if verdict.correct:
            correct[i // 8].add(response)
    assert sum(len(answers) >= 2 for answers in correct.values()) >= 3, dict(correct)
