"""Training prompts are checked against the engine's context before anything starts, as collection and
evaluation check theirs: too long is one error, or with `overlong_prompts: filter` left out and counted."""

import logging

import pytest
from transformers import AutoTokenizer

from rlep.data.problem import render_prompt
from rlep.data.prompt_length import PromptTooLongError
from rlep.data.sources import load_problems
from rlep.tasks.settings.train import TrainConfig
from rlep.tasks.training.loop.prompts import PromptSampler, fitting


def test_training_prompts_must_leave_room_for_an_answer(fixture_model):
    tokenizer = AutoTokenizer.from_pretrained(fixture_model)
    config = TrainConfig.model_validate(
        {"problems": {"source": "tiny-math", "split": "train", "limit": 12}, "sampling": {"max_tokens": 24}}
    )
    problems = load_problems(config.problems)
    assert fitting(problems, config, tokenizer) == problems  # the defaults fit (256 tokens of context)
    lengths = sorted(len(tokenizer(render_prompt(p), add_special_tokens=False).input_ids) for p in problems)
    middle = lengths[len(lengths) // 2] + 24  # room for the shorter half's prompts and 24 new tokens
    tight = config.model_copy(update={"engine": config.engine.model_copy(update={"max_model_len": middle})})
    with pytest.raises(PromptTooLongError, match=f"max_model_len {middle} - max new tokens 24"):
        fitting(problems, tight, tokenizer)
    lenient = tight.model_copy(
        update={"prompt_length": tight.prompt_length.model_copy(update={"overlong_prompts": "filter"})}
    )
    kept = fitting(problems, lenient, tokenizer)
    assert 0 < len(kept) < len(problems)


def test_a_step_larger_than_the_problems_is_said_once_and_still_draws_them_all(caplog):
    problems = load_problems(TrainConfig.model_validate({"problems": {"source": "tiny-math", "limit": 4}}).problems)
    with caplog.at_level(logging.WARNING, logger="rlep.tasks.training.loop.prompts"):
        sampler = PromptSampler(problems, seed=0, per_step=10)
    (record,) = caplog.records
    assert "prompts_per_step 10 is more than the 4 training problems" in record.getMessage()
    assert "about 2.5 times each" in record.getMessage()
    drawn = sampler.next(10)
    assert len(drawn) == 10 and {p.id for p in drawn} == {p.id for p in problems}
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rlep.tasks.training.loop.prompts"):
        PromptSampler(problems, seed=0, per_step=4)
    assert caplog.records == []
