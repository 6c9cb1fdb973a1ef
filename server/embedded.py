"""The embedded default: ``ponder serve`` with no engine serves the model Ponder ships.

With nothing configured, the server runs the project's own small model (a 1M-parameter
Qwen2 trained on 3-digit addition, ``training/demo/model``) in process through
:class:`~scaffolds.engines.local.LocalEngine`, with the ``compact`` prompt set it was
trained with and a few scaffold aliases. It needs no GPU and no download, so a first
``ponder serve`` answers real requests:

    curl localhost:8000/v1/chat/completions -H 'Content-Type: application/json' \\
      -d '{"model": "ponder-addition+maj8", "messages": [{"role": "user", "content": "347+589="}]}'

>>> settings = with_embedded_default(Settings())
>>> settings.model, settings.prompts, settings.engines[0].startswith("local:")
('ponder-addition', 'compact', True)
"""

from __future__ import annotations

from pathlib import Path

from server.settings import Settings

EMBEDDED_MODEL = "ponder-addition"
SHIPPED_MODEL_DIR = Path(__file__).resolve().parents[1] / "training" / "demo" / "model"
EMBEDDED_ALIASES = {
    "maj8": "majority(k=8)",
    "gsr4": "gsr(n=4)",
    "best4": "best_of_n(n=4)",
}


def with_embedded_default(settings: Settings) -> Settings:
    """``settings`` serving the shipped model in process when it names no model at all."""
    if settings.served_models():
        return settings
    return settings.model_copy(
        update={
            "model": EMBEDDED_MODEL,
            "engines": (f"local:{SHIPPED_MODEL_DIR}",),
            "prompts": "compact",
            "aliases": dict(EMBEDDED_ALIASES),
            "default_max_tokens": settings.default_max_tokens or 8,
        }
    )
