"""Prompt rendering: plain text exactly as before for a model without a chat template, the tokenizer's chat
template (generation prompt added) for one with it, and the `chat_template` setting forcing either way."""

import re

import pytest
from transformers import AutoTokenizer

from rlep.data.problem import DEFAULT_PROMPT_TEMPLATE, Problem, check_prompt_template, render_prompt
from rlep.data.prompting import PromptError, chat_tokenizer, has_chat_template
from rlep.data.tiny_math import generate

PROBLEM = Problem(id="1", problem="What is 2+3?", answer="5", data_source="s")


def test_a_model_without_a_chat_template_keeps_the_plain_prompt_bit_for_bit(fixture_model):
    assert chat_tokenizer(fixture_model, "auto") is None
    for problem in generate("test", 20):
        # The rendering before chat templates existed, written out.
        assert (
            render_prompt(problem, DEFAULT_PROMPT_TEMPLATE, None)
            == f"Q: {problem.problem}\nPut the final answer in \\boxed{{}}.\nA: "
        )
    assert render_prompt(PROBLEM, "{problem} =", chat_tokenizer(fixture_model, "auto")) == "What is 2+3? ="


def test_auto_uses_the_chat_template_with_the_filled_template_as_user_message(chat_model):
    chat = chat_tokenizer(chat_model, "auto")
    assert chat is not None and has_chat_template(chat)
    prompt = render_prompt(PROBLEM, "{problem} Put the final answer in \\boxed{{}}.", chat)
    assert prompt == "<|user|>\nWhat is 2+3? Put the final answer in \\boxed{}.<|end|>\n<|assistant|>\n"
    # The same string transformers renders for that message with the generation prompt (verl's call).
    reference = AutoTokenizer.from_pretrained(chat_model).apply_chat_template(
        [{"role": "user", "content": "What is 2+3? Put the final answer in \\boxed{}."}],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert prompt == reference
    # The tiny tokenizer spells every character of it: one token each, nothing unknown.
    ids = chat(prompt, add_special_tokens=False).input_ids
    assert len(ids) == len(prompt) and chat.unk_token_id not in ids


def test_a_problems_own_messages_are_used_as_they_are(chat_model):
    chat = chat_tokenizer(chat_model, "on")
    messages = ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+3? Answer after ####."})
    problem = Problem(id="1", problem="2+3?", answer="5", data_source="openai/gsm8k", messages=messages)
    assert render_prompt(problem, DEFAULT_PROMPT_TEMPLATE, chat) == (
        "<|system|>\nBe brief.<|end|>\n<|user|>\n2+3? Answer after ####.<|end|>\n<|assistant|>\n"
    )
    # Without a chat template the messages cannot be shown as turns: the template fills the problem text.
    assert render_prompt(problem, "{problem} =", None) == "2+3? ="


def test_the_setting_forces_either_way(chat_model, fixture_model):
    assert chat_tokenizer(chat_model, "off") is None
    assert render_prompt(PROBLEM, "{problem} =", chat_tokenizer(chat_model, "off")) == "What is 2+3? ="
    with pytest.raises(
        PromptError, match=r"chat_template: on, but the tokenizer of .*tiny-math-\w+ has no chat template"
    ):
        chat_tokenizer(fixture_model, "on")
    loaded = AutoTokenizer.from_pretrained(chat_model)
    assert chat_tokenizer(loaded, "on") is loaded  # a tokenizer already loaded is used as it is


def test_a_chat_must_end_with_a_user_turn(chat_model):
    chat = chat_tokenizer(chat_model, "on")
    problem = Problem(
        id="1", problem="x", answer="1", data_source="s", messages=({"role": "assistant", "content": "hi"},)
    )
    with pytest.raises(PromptError, match="must end with a user message"):
        render_prompt(problem, DEFAULT_PROMPT_TEMPLATE, chat)


@pytest.mark.parametrize(
    "template, why",
    [
        ("Q: {problem} {x}", "KeyError: 'x'"),
        ("Q: {problem} {oops", "expected '}'"),
        ("{problem} {0}", "IndexError"),
        ("{problem} }", "Single '}'"),
        ("Q: no field", "must contain the `{problem}` placeholder"),
    ],
)
def test_a_template_render_prompt_could_not_fill_is_refused_with_the_settings(template, why):
    from rlep.tasks.settings.collect import CollectConfig
    from rlep.tasks.settings.evaluate import EvalConfig
    from rlep.tasks.settings.train import TrainConfig

    for config in (TrainConfig, CollectConfig, EvalConfig):  # before any work: the command line says one line
        with pytest.raises(ValueError, match=re.escape(why)) as refused:
            config(prompt_template=template)
        assert repr(template) in str(refused.value)
    check_prompt_template(DEFAULT_PROMPT_TEMPLATE)  # a literal brace written `{{}}` is fine
    assert render_prompt(PROBLEM, DEFAULT_PROMPT_TEMPLATE).endswith("\\boxed{}.\nA: ")
