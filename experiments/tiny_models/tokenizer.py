"""A character-level tokenizer for the addition model, built offline (nothing downloaded).

One token per character: digits, the punctuation the compact prompt set uses
(``+ = [ ] , | > # ? @ ; !`` and a few more), lower-case letters (the compact set's
``ok`` marker) and space. Special tokens: ``<pad>``, ``<eos>`` (the end of every
answer) and ``<unk>``. There is no BOS token and no post-processor, so the token ids of
a prompt are exactly its characters, with or without ``add_special_tokens``.

The chat template renders only the contents of the non-system messages, one after the
other, and the generation prompt is empty: ``[{"role": "user", "content": "347+589="}]``
renders to ``"347+589="``, the same string the plain-text form sends. An assistant turn
followed by a user turn (the "force an answer" cue) renders as prompt, reply and cue
glued together, exactly like the plain-text form of that continuation.

>>> tok = build_tokenizer()
>>> tok.convert_ids_to_tokens(tok("347+589=")["input_ids"])
['3', '4', '7', '+', '5', '8', '9', '=']
>>> tok.decode(tok("12+3=[15,14]")["input_ids"])
'12+3=[15,14]'
>>> tok.apply_chat_template([{"role": "user", "content": "1+2="}], tokenize=False,
...                         add_generation_prompt=True)
'1+2='
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, EOS, UNK)
THINK_START, THINK_END = "<think>", "</think>"
"""The thinking variant's two extra tokens (ordinary added tokens, not special: they stay
in decoded text, where vLLM's reasoning parsers look for them)."""
ALPHABET = string.digits + "+-*/=()[]{},.:;!?@#|<>_ " + string.ascii_lowercase
"""Every ordinary token, one character each (ids follow the special tokens, in order)."""

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] != 'system' %}{{ message['content'] }}{% endif %}"
    "{% endfor %}"
)
"""Contents of the non-system turns, concatenated; the generation starts right after."""

THINKING_CHAT_TEMPLATE = CHAT_TEMPLATE + (
    "{% if add_generation_prompt and enable_thinking is defined and not enable_thinking %}"
    "<think></think>{% endif %}"
)
"""The thinking variant's: the same, and with ``enable_thinking: false`` (Qwen3's chat
template switch) the generation prompt is an empty, closed thinking block."""


def vocabulary(thinking: bool = False) -> dict[str, int]:
    """Token -> id: the special tokens first, then :data:`ALPHABET` (then, for the
    thinking variant, ``<think>`` and ``</think>``)."""
    tokens = [*SPECIAL_TOKENS, *ALPHABET, *((THINK_START, THINK_END) if thinking else ())]
    if len(set(tokens)) != len(tokens):
        raise ValueError("duplicate characters in the alphabet")
    return {token: index for index, token in enumerate(tokens)}


def build_tokenizer(thinking: bool = False) -> Any:
    """A ``PreTrainedTokenizerFast`` over single characters, with the chat template set;
    ``thinking`` adds ``<think>`` and ``</think>`` as whole tokens.

    >>> tok = build_tokenizer(thinking=True)
    >>> len(tok("<think>16</think>")["input_ids"])
    4
    >>> tok.apply_chat_template([{"role": "user", "content": "1+2="}], tokenize=False,
    ...                         add_generation_prompt=True, enable_thinking=False)
    '1+2=<think></think>'
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    # A BPE model with no merges is a character-level model: every word falls apart into
    # its characters. No pre-tokenizer, so spaces are ordinary characters.
    core = Tokenizer(models.BPE(vocab=vocabulary(thinking), merges=[], unk_token=UNK))
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    if thinking:
        core.add_tokens([AddedToken(t, normalized=False) for t in (THINK_START, THINK_END)])
    core.decoder = decoders.Fuse()
    fast: Any = PreTrainedTokenizerFast  # typed loosely: transformers' stubs are partial
    tokenizer = fast(
        tokenizer_object=core,
        pad_token=PAD,
        eos_token=EOS,
        unk_token=UNK,
        bos_token=None,
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=2048,
    )
    tokenizer.chat_template = THINKING_CHAT_TEMPLATE if thinking else CHAT_TEMPLATE
    return tokenizer


def save_tokenizer(out: str | Path) -> Any:
    """Build the tokenizer and ``save_pretrained`` it into ``out``; returns it."""
    tokenizer = build_tokenizer()
    tokenizer.save_pretrained(str(out))
    return tokenizer
