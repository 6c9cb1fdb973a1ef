"""Engines: OpenAI-compatible HTTP servers (vLLM, SGLang, ...), an in-process transformers
model, and the test double. Importing this package does not import torch.

The package is the engines' public API: import the names in ``__all__`` from here (the
protocol they implement is :mod:`scaffolds.engines.protocol`)."""

from scaffolds.engines.local import LocalEngine
from scaffolds.engines.mock import MockEngine
from scaffolds.engines.openai_http import OpenAIEngine

__all__ = ["LocalEngine", "MockEngine", "OpenAIEngine"]
