"""Fixtures for the synthetic-task tests: a tiny random model and the shipped model."""

from __future__ import annotations

from pathlib import Path

import pytest

from scaffolds.models import model_path

ROOT = Path(__file__).resolve().parents[3]
SHIPPED_MODEL = model_path("ponder-addition")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random 2-layer Qwen2 (hidden 32) over the addition tokenizer, saved to a temp dir."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import torch
    from transformers import Qwen2ForCausalLM

    from experiments.tiny_models.model import model_config
    from experiments.tiny_models.tokenizer import build_tokenizer

    out = tmp_path_factory.mktemp("tiny-qwen2")
    tokenizer = build_tokenizer()
    tokenizer.save_pretrained(str(out))
    torch.manual_seed(0)
    config = model_config(
        vocab_size=len(tokenizer),
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
    Qwen2ForCausalLM(config).save_pretrained(str(out))
    return out


@pytest.fixture(scope="session")
def shipped_model_dir() -> Path:
    """The trained addition model committed under ``scaffolds/models/ponder-addition``."""
    if not (SHIPPED_MODEL / "config.json").exists():
        pytest.fail(f"the shipped model is missing: {SHIPPED_MODEL}")
    return SHIPPED_MODEL
