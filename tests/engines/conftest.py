"""Fixtures for the in-process engine tests: the shipped addition model, and a tiny
random model over its vocabulary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scaffolds.models import model_path

SHIPPED_MODEL = model_path("ponder-addition")


@pytest.fixture(scope="session")
def shipped_model_dir() -> Path:
    """The trained addition model committed under ``scaffolds/models/ponder-addition``."""
    if not (SHIPPED_MODEL / "config.json").exists():
        pytest.fail(f"the shipped model is missing: {SHIPPED_MODEL}")
    return SHIPPED_MODEL


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory, shipped_model_dir: Path) -> Path:
    """A random 2-layer Qwen2 (hidden 32) over the shipped model's tokenizer, in a temp dir."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    out = tmp_path_factory.mktemp("tiny-qwen2")
    tokenizer = AutoTokenizer.from_pretrained(str(shipped_model_dir))
    tokenizer.save_pretrained(str(out))
    shipped = json.loads((shipped_model_dir / "config.json").read_text())
    kept = ("vocab_size", "tie_word_embeddings", "bos_token_id", "eos_token_id", "pad_token_id")
    config = Qwen2Config(
        **{key: shipped[key] for key in kept},
        use_cache=True,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
    )
    assert (config.eos_token_id, config.pad_token_id) == (
        tokenizer.eos_token_id,
        tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(str(out))
    return out
