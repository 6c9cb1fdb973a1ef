"""Engines: OpenAI-compatible HTTP servers (vLLM, SGLang, ...), and the test double."""

from scaffolds.engines.mock import MockEngine

__all__ = ["MockEngine"]
