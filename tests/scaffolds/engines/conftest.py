"""Fixtures for the in-process engine tests: the shipped addition model, and a tiny
random model over its vocabulary."""

from __future__ import annotations

from pathlib import Path

import pytest

from scaffolds.models import model_path
from testing.tiny_qwen2 import save_tiny_qwen2

SHIPPED_MODEL = model_path("ponder-addition")


@pytest.fixture(scope="session")
def shipped_model_dir() -> Path:
    """The trained addition model committed under ``scaffolds/models/ponder-addition``."""
    if not (SHIPPED_MODEL / "config.json").exists():
        pytest.fail(f"the shipped model is missing: {SHIPPED_MODEL}")
    return SHIPPED_MODEL


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random 2-layer Qwen2 (hidden 32) over the addition tokenizer, saved to a temp dir."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return save_tiny_qwen2(tmp_path_factory.mktemp("tiny-qwen2"))
