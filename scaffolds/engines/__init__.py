"""Engines: OpenAI-compatible HTTP servers (vLLM, SGLang, ...), an in-process transformers
model, and the test double. Importing this package does not import torch."""

from scaffolds.engines.local import LocalEngine
from scaffolds.engines.mock import MockEngine
from scaffolds.engines.openai_http import OpenAIEngine

__all__ = ["LocalEngine", "MockEngine", "OpenAIEngine"]
