"""A tiny random Qwen2 and a char-level tokenizer, built offline for the training tests."""

from __future__ import annotations

from pathlib import Path

CHARS = (
    "0123456789+-=*/()[]{},.:;|<>#?@!$%&^_ \\\nabcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'][0] }}:{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}a:{% endif %}"
)


def build_tiny_model(folder: Path, *, seed: int = 0) -> Path:
    """Save a ~80k-parameter Qwen2 (hidden 64, 2 layers, 4 heads) and its tokenizer."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    # One token per character, spelled byte-level as Qwen2's tokenizer expects (it
    # rebuilds the pipeline around the saved vocabulary), and no merges.
    byte_char = bytes_to_unicode()
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2}
    for char in CHARS:
        vocab.setdefault(byte_char[ord(char)], len(vocab))
    core = Tokenizer(models.BPE(vocab, [], unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        eos_token="<eos>",
        unk_token="<unk>",
        padding_side="left",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    config = Qwen2Config(
        vocab_size=len(vocab),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
