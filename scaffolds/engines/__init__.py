"""Engines: OpenAI-compatible HTTP servers (vLLM, SGLang, ...), and the test double."""

from scaffolds.engines.mock import MockEngine
from scaffolds.engines.openai_http import OpenAIEngine

__all__ = ["MockEngine", "OpenAIEngine"]
