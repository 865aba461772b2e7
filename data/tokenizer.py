"""The character-level tokenizer of rlep's tiny model: one token per character, nothing learned.

Vocabulary: the special tokens `<pad>`, `</s>` (end of sequence) and `<unk>`, then `\\n` and the 95
printable ASCII characters (space to `~`), 99 tokens in all. Any other character encodes to `<unk>`.
Every tiny-math prompt and answer form is plain ASCII, so it round-trips exactly.

Built with the `tokenizers` library as a byte-level BPE with no merges, so every character is one
token: a ByteLevel pre-tokenizer maps each byte to GPT-2's printable alphabet (space -> `Ġ`, newline ->
`Ċ`, printable ASCII to itself) and the vocabulary holds those symbols. Why not a plain WordLevel over
characters: next to a Qwen2 `config.json`, transformers 5's `AutoTokenizer` (and so vLLM) loads the
directory as `Qwen2Tokenizer`, which keeps the vocabulary but applies Qwen2's own byte-level pipeline;
a vocabulary with a literal space and newline then loses every space and newline of the prompt. With
byte-level symbols, our pipeline and Qwen2's give the same ids (tested through `AutoTokenizer`).

There is no BOS token and nothing is added around the text: the tiny model always sees a prompt that
starts with the same template, and vLLM and transformers then encode prompts identically.

Run `python -m data.tokenizer OUT_DIR` to write `tokenizer.json` and `tokenizer_config.json`.
"""

from __future__ import annotations

import string
import sys
from functools import cache
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD_TOKEN = "<pad>"
EOS_TOKEN = "</s>"
UNK_TOKEN = "<unk>"
SPECIAL_TOKENS = (PAD_TOKEN, EOS_TOKEN, UNK_TOKEN)
# string.printable also holds \t\r\x0b\x0c, which no prompt uses; keep \n (the template has two).
CHARACTERS = ("\n", *(chr(c) for c in range(32, 127)))
assert set(CHARACTERS) == set(string.printable) - set("\t\r\x0b\x0c")


@cache
def byte_symbols() -> dict[int, str]:
    """GPT-2's byte -> printable symbol table (the alphabet of every byte-level BPE, Qwen2's included)."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("\xa1"), ord("\xac") + 1),
        *range(ord("\xae"), ord("\xff") + 1),
    ]
    symbols, extra = dict(zip(printable, map(chr, printable))), 0
    for byte in range(256):
        if byte not in symbols:
            symbols[byte] = chr(256 + extra)
            extra += 1
    return symbols


def vocabulary() -> dict[str, int]:
    """Token -> id: special tokens first (so `<pad>` is 0 and `</s>` is 1), then the characters, each
    spelled as its byte-level symbol."""
    symbols = byte_symbols()
    return {token: i for i, token in enumerate((*SPECIAL_TOKENS, *(symbols[ord(c)] for c in CHARACTERS)))}


def build_tokenizer(model_max_length: int = 256) -> PreTrainedTokenizerFast:
    """The character-level tokenizer, ready to `save_pretrained`."""
    core = Tokenizer(models.BPE(vocab=vocabulary(), merges=[], unk_token=UNK_TOKEN))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(list(SPECIAL_TOKENS))
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        model_max_length=model_max_length,
        # Left padding is what batched generation needs; training code pads by hand.
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )


def save_tokenizer(out_dir: Path, model_max_length: int = 256) -> PreTrainedTokenizerFast:
    """Build the tokenizer and write it to `out_dir` (created if missing)."""
    tokenizer = build_tokenizer(model_max_length)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(out_dir))
    return tokenizer


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m data.tokenizer OUT_DIR")
    save_tokenizer(Path(sys.argv[1]))
    print(f"wrote {sys.argv[1]}")
