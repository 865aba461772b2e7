"""The character-level tokenizer: one token per character, exact round trips, loads back from disk."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from rlep.data.problem import render_prompt
from rlep.data.tiny_math import answer_forms, generate
from rlep.data.tokenizer import CHARACTERS, EOS_TOKEN, PAD_TOKEN, UNK_TOKEN, build_tokenizer, save_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def tiny_math_texts() -> list[str]:
    """Every prompt and every boxed answer form of a large sample of both splits."""
    problems = generate("train", 3000) + generate("test", 500)
    texts = [render_prompt(p) for p in problems]
    texts += [f"\\boxed{{{form}}}" for p in problems for form in answer_forms(p.answer)]
    return texts


def test_vocabulary_is_special_tokens_then_characters(tokenizer):
    assert len(tokenizer) == 3 + len(CHARACTERS) == 99
    assert (tokenizer.pad_token, tokenizer.pad_token_id) == (PAD_TOKEN, 0)
    assert (tokenizer.eos_token, tokenizer.eos_token_id) == (EOS_TOKEN, 1)
    assert (tokenizer.unk_token, tokenizer.unk_token_id) == (UNK_TOKEN, 2)
    assert tokenizer.bos_token is None


def test_every_tiny_math_text_round_trips_one_token_per_character(tokenizer):
    for text in tiny_math_texts():
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert len(ids) == len(text), text
        assert tokenizer.unk_token_id not in ids, text
        assert tokenizer.decode(ids) == text


def test_decoding_inserts_no_spaces_and_keeps_the_real_ones(tokenizer):
    ids = tokenizer("a b\n\\frac{1}{2}", add_special_tokens=False)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(ids)[:4] == [
        "a",
        "Ġ",
        "b",
        "Ċ",
    ]  # byte-level spelling of " " and "\n"
    assert tokenizer.decode(ids) == "a b\n\\frac{1}{2}"


def test_eos_is_one_token_and_skipped_on_request(tokenizer):
    ids = tokenizer("\\boxed{7}</s>", add_special_tokens=False)["input_ids"]
    assert ids[-1] == tokenizer.eos_token_id and len(ids) == len("\\boxed{7}") + 1
    assert tokenizer.decode(ids, skip_special_tokens=True) == "\\boxed{7}"
    assert tokenizer.decode(ids) == "\\boxed{7}</s>"


def test_nothing_is_added_around_the_text(tokenizer):
    assert tokenizer("7")["input_ids"] == tokenizer("7", add_special_tokens=False)["input_ids"]


def test_unknown_characters_become_unk(tokenizer):
    ids = tokenizer("1é\t2", add_special_tokens=False)["input_ids"]
    assert ids[1] == ids[2] == tokenizer.unk_token_id
    assert tokenizer.decode(ids, skip_special_tokens=True) == "12"


def test_batches_pad_on_the_left_for_generation(tokenizer):
    batch = tokenizer(["1+1=?", "12+13=?"], padding=True)
    assert batch["input_ids"][0][:2] == [tokenizer.pad_token_id] * 2
    assert batch["attention_mask"][0] == [0, 0] + [1] * 5


def test_saved_tokenizer_loads_back_identically(tmp_path, tokenizer):
    save_tokenizer(tmp_path)
    assert (tmp_path / "tokenizer.json").is_file()
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    for text in tiny_math_texts()[:200]:
        assert loaded(text)["input_ids"] == tokenizer(text)["input_ids"]
        assert loaded.decode(loaded(text)["input_ids"]) == text
    assert (loaded.pad_token_id, loaded.eos_token_id, loaded.padding_side) == (0, 1, "left")


def test_autotokenizer_next_to_a_qwen2_config_gives_the_same_ids(tmp_path):
    """What vLLM and `AutoTokenizer` load (a Qwen2Tokenizer, in transformers 5) must encode and decode
    exactly as the tokenizer the model was trained with."""
    from transformers import Qwen2Config

    Qwen2Config(vocab_size=99, hidden_size=64, num_attention_heads=1, num_key_value_heads=1).save_pretrained(tmp_path)
    ours = save_tokenizer(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    for text in tiny_math_texts()[::50] + ["a b\n  c", " lead", "trail "]:
        ids = ours(text, add_special_tokens=False)["input_ids"]
        assert loaded(text, add_special_tokens=False)["input_ids"] == ids, text
        assert loaded.decode(ids + [ours.eos_token_id], skip_special_tokens=True) == text
