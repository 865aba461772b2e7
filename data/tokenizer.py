"""The character-level tokenizer of rlep's tiny model: one token per character, nothing learned.

Vocabulary: the special tokens `<pad>`, `</s>` (end of sequence) and `<unk>`, then `\\n` and the 95
printable ASCII characters (space to `~`), 99 tokens in all. Any other character encodes to `<unk>`.
Every tiny-math prompt and answer form is plain ASCII, so it round-trips exactly.

Built with the `tokenizers` library (a WordLevel model over a FixedLength(1) pre-tokenizer, a Fuse
decoder so decoding inserts no spaces) and wrapped as `transformers.PreTrainedTokenizerFast`, so the
saved directory loads with `AutoTokenizer.from_pretrained(dir)` and in vLLM.

There is no BOS token and nothing is added around the text: the tiny model always sees a prompt that
starts with the same template, and vLLM and transformers then encode prompts identically.

Run `python -m data.tokenizer OUT_DIR` to write `tokenizer.json` and `tokenizer_config.json`.
"""

from __future__ import annotations

import string
import sys
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


def vocabulary() -> dict[str, int]:
    """Token -> id: special tokens first (so `<pad>` is 0 and `</s>` is 1), then the characters."""
    return {token: i for i, token in enumerate((*SPECIAL_TOKENS, *CHARACTERS))}


def build_tokenizer(model_max_length: int = 256) -> PreTrainedTokenizerFast:
    """The character-level tokenizer, ready to `save_pretrained`."""
    core = Tokenizer(models.WordLevel(vocab=vocabulary(), unk_token=UNK_TOKEN))
    core.pre_tokenizer = pre_tokenizers.FixedLength(length=1)
    core.decoder = decoders.Fuse()
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
