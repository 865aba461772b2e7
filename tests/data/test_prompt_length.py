"""The prompt length check run before sampling."""

import logging

import pytest

from rlep.data.prompt_length import PromptLengthConfig, PromptTooLongError, check_prompt_lengths


def test_prompts_that_fit_pass():
    check = check_prompt_lengths([10, 40, 232], max_model_len=256, max_new_tokens=24)
    assert (check.kept, check.dropped, check.budget, check.longest) == ((0, 1, 2), (), 232, 232)


def test_an_overlong_prompt_is_one_line_naming_the_longest():
    with pytest.raises(PromptTooLongError) as info:
        check_prompt_lengths([10, 300, 233, 5], max_model_len=256, max_new_tokens=24, names=["a", "b", "c", "d"])
    message = str(info.value)
    assert "\n" not in message
    assert message == (
        "2 of 4 prompts are longer than 232 tokens (max_model_len 256 - max new tokens 24); the longest (b) has 300: "
        "raise the engine's max_model_len or lower max_tokens, or set overlong_prompts to filter to leave them out"
    )


def test_filter_leaves_overlong_prompts_out_and_reports_them(caplog):
    with caplog.at_level(logging.WARNING, logger="rlep.data.prompt_length"):
        check = check_prompt_lengths([10, 300, 233, 5], max_model_len=256, max_new_tokens=24, overlong="filter")
    assert (check.kept, check.dropped) == ((0, 3), (1, 2))
    assert check.summary() == "left out 2 of 4 prompts longer than 232 tokens"
    assert "left out 2 of 4 prompts" in caplog.text


def test_filter_refuses_when_nothing_fits():
    with pytest.raises(PromptTooLongError, match="every prompt is longer than 6 tokens"):
        check_prompt_lengths([7, 9], max_model_len=16, max_new_tokens=10, overlong="filter")


def test_no_room_for_any_prompt():
    with pytest.raises(PromptTooLongError, match=r"max new tokens \(256\) leave no room"):
        check_prompt_lengths([1], max_model_len=256, max_new_tokens=256)


def test_config_choices():
    assert PromptLengthConfig().overlong_prompts == "error"
    with pytest.raises(ValueError, match="overlong_prompts"):
        PromptLengthConfig(overlong_prompts="truncate")


def test_fitting_problems_counts_with_the_model_tokenizer():
    from rlep.data.problem import Problem, render_prompt
    from rlep.data.prompt_length import fitting_problems, prompt_token_counts
    from rlep.data.sources import ProblemSourceError
    from rlep.data.tokenizer import build_tokenizer

    tokenizer = build_tokenizer()  # the tiny model's: one token per character, no BOS added
    problems = [Problem(id=f"p{n}", problem="1+" * n + "1", answer=str(n + 1), data_source="s") for n in (1, 20, 40)]
    prompts = [render_prompt(p) for p in problems]
    assert prompt_token_counts(prompts, tokenizer) == [len(prompt) for prompt in prompts] == [44, 82, 122]
    kept = fitting_problems(problems, prompts, tokenizer, max_model_len=128, max_new_tokens=40, overlong="filter")
    assert [p.id for p in kept] == ["p1", "p20"]  # 122 + 40 > 128
    with pytest.raises(ProblemSourceError, match=r"the longest \(p40\) has 122"):  # the CLI's one-line errors
        fitting_problems(problems, prompts, tokenizer, max_model_len=128, max_new_tokens=40)
    assert fitting_problems(problems, prompts, tokenizer, max_model_len=162, max_new_tokens=40) == problems
