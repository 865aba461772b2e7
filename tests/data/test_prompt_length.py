"""The prompt length check run before sampling."""

import json
import logging

import pytest

from rlep.data.prompt_length import PromptTooLongError, check_prompt_lengths
from rlep.tasks.settings.prompt_length import PromptLengthConfig


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
    with pytest.raises(PromptTooLongError, match=r"max_tokens \(256, sampling\) leaves no room"):
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


def test_a_max_model_len_above_the_models_positions_is_one_line_naming_the_limit():
    with pytest.raises(PromptTooLongError) as info:
        check_prompt_lengths([10], max_model_len=512, max_new_tokens=24, model_limit=256)
    assert str(info.value) == (
        "max_model_len 512 is above the model's limit of 256 tokens (max_position_embeddings in its config.json): "
        "set the engine's max_model_len to 256 or less"
    )
    assert check_prompt_lengths([10], max_model_len=256, max_new_tokens=24, model_limit=256).kept == (0,)


@pytest.mark.parametrize(
    "counts, max_model_len, limit, advice",
    [
        # room within the model's limit: raise max_model_len to what the longest prompt needs
        ([10, 300], 256, 512, "raise the engine's max_model_len to 324 (the model's limit is 512)"),
        # the longest needs more than the model has: fewer new tokens, at the limit
        (
            [10, 250],
            128,
            256,
            "set the engine's max_model_len to 256, the model's limit, and lower max_tokens to 6 or less",
        ),
        ([10, 250], 256, 256, "lower max_tokens to 6 or less"),
        # a prompt longer than the whole model: nothing but leaving it out helps
        ([10, 600], 256, 256, "it is longer than the model's limit of 256 tokens"),
    ],
)
def test_the_advice_never_suggests_a_max_model_len_above_the_models_limit(counts, max_model_len, limit, advice):
    with pytest.raises(PromptTooLongError) as info:
        check_prompt_lengths(counts, max_model_len=max_model_len, max_new_tokens=24, model_limit=limit)
    message = str(info.value)
    assert message.endswith(f"has {counts[1]}: {advice}, or set overlong_prompts to filter to leave them out")
    assert "\n" not in message


def test_no_room_for_any_prompt_within_the_models_limit():
    with pytest.raises(PromptTooLongError, match=r"lower max_tokens below 256, the model's limit$"):
        check_prompt_lengths([1], max_model_len=256, max_new_tokens=256, model_limit=256)
    with pytest.raises(PromptTooLongError, match=r"raise the engine's max_model_len \(the model's limit is 256\) or"):
        check_prompt_lengths([1], max_model_len=128, max_new_tokens=200, model_limit=256)


def test_the_models_limit_is_read_from_its_config(tmp_path):
    from rlep.data.prompt_length import model_context_limit

    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 256, "model_type": "qwen2"}))
    assert model_context_limit(tmp_path) == 256
    (tmp_path / "config.json").write_text(json.dumps({"n_positions": 1024}))  # GPT-2's name for it
    assert model_context_limit(tmp_path) == 1024
    # linear RoPE scaling stretches the positions (as vLLM counts them); no key, or no local model: unknown
    scaled = {"max_position_embeddings": 256, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}
    (tmp_path / "config.json").write_text(json.dumps(scaled))
    assert model_context_limit(tmp_path) == 512
    (tmp_path / "config.json").write_text("{}")
    assert model_context_limit(tmp_path) is None
    assert model_context_limit("some-org/some-model") is None and model_context_limit(None) is None


def test_fitting_problems_refuses_a_max_model_len_above_the_limit_given():
    from rlep.data.prompt_length import fitting_problems
    from rlep.data.tokenizer import build_tokenizer

    with pytest.raises(PromptTooLongError, match="max_model_len 512 is above the model's limit of 128 tokens"):
        fitting_problems([], [], build_tokenizer(), max_model_len=512, max_new_tokens=24, model_limit=128)
    assert fitting_problems([], [], build_tokenizer(), max_model_len=512, max_new_tokens=24) == []
