"""A tiny random Qwen2 over the shipped addition model's vocabulary, for tests that need
a real model in process (transformers) that runs in milliseconds.

>>> sorted(TINY_SIZES)[:2]
['head_dim', 'hidden_size']
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from scaffolds.models import model_path

__all__ = ["TINY_SIZES", "save_tiny_qwen2"]

TINY_SIZES: Mapping[str, int] = MappingProxyType(
    {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "max_position_embeddings": 256,
    }
)
"""The dimensions of the tiny model (2 layers, hidden 32)."""

_KEPT = ("vocab_size", "tie_word_embeddings", "bos_token_id", "eos_token_id", "pad_token_id")


def save_tiny_qwen2(out: Path, *, seed: int = 0) -> Path:
    """Save into ``out`` a randomly initialised (``seed``) 2-layer Qwen2 with the shipped
    addition model's tokenizer, vocabulary and special tokens; returns ``out``."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    shipped = model_path("ponder-addition")
    tokenizer: Any = AutoTokenizer.from_pretrained(str(shipped))
    tokenizer.save_pretrained(str(out))
    fields = json.loads((shipped / "config.json").read_text())
    settings: dict[str, Any] = {key: fields[key] for key in _KEPT}
    settings.update(TINY_SIZES, use_cache=True)
    config = Qwen2Config(**settings)
    if (config.eos_token_id, config.pad_token_id) != (
        tokenizer.eos_token_id,
        tokenizer.pad_token_id,
    ):
        raise ValueError(f"{shipped}: the config's special tokens are not the tokenizer's")
    torch.manual_seed(seed)
    Qwen2ForCausalLM(config).save_pretrained(str(out))
    return out
