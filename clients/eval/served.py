"""What the server says of the evaluated model: its ``ponder`` card in ``/v1/models``,
asked once per run.

Ponder's card of a model (or of its base, for a ``base+spec`` id) says how many runs the
server executes at once (``max_concurrent_runs``: the requests in flight that keep it
full), how the model's answers are read (``answer_format``) and where its thinking
starts and ends in a text (``thinking_markers``). Any other server has no such card:
each reader then gives None and the run takes its defaults.

>>> cards = [{"id": "m", "ponder": {"answer_format": "lenient", "max_concurrent_runs": 64,
...           "thinking_markers": {"start": "<|begin_of_thought|>",
...                                "end": "<|end_of_thought|>"}}}, {"id": "x"}]
>>> card = model_card(cards, "m+gsr(n=2)")
>>> card_answer_format(card), card_concurrency(card), card_thinking(card).end
('lenient', 64, '<|end_of_thought|>')
>>> model_card(cards, "x") is None, card_answer_format(None), card_concurrency(None)
(True, None, None)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from scaffolds.evaluation.answers import ANSWER_FORMATS, AnswerFormat, ThinkingMarkers

__all__ = [
    "DEFAULT_CONCURRENCY",
    "card_answer_format",
    "card_concurrency",
    "card_thinking",
    "model_card",
    "served_card",
]

DEFAULT_CONCURRENCY = 256
"""Requests in flight when the server does not say what it runs at once: vLLM's default
batch (``max_num_seqs``) on most GPUs."""

Card = Mapping[str, Any]
"""A model's ``ponder`` card (the object under ``ponder`` in its ``/v1/models`` entry)."""


def model_card(cards: Sequence[Any], model: str) -> Card | None:
    """The ``ponder`` card of ``model``, or of its base for a ``base+spec`` id, among
    ``/v1/models``'s entries; None when no entry has one."""
    wanted = (model, model.partition("+")[0])
    entries = [e for e in cards if isinstance(e, Mapping) and isinstance(e.get("ponder"), Mapping)]
    for name in wanted:
        for entry in entries:
            if entry.get("id") == name:
                return entry["ponder"]  # type: ignore[no-any-return]
    return None


async def served_card(
    base_url: str, model: str, api_key: str | None, timeout_s: float = 30.0
) -> Card | None:
    """``model``'s ``ponder`` card from one ``GET /models`` at ``base_url``; None from a
    server that has none for it (any other server) or cannot be asked."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            reply = await client.get(f"{base_url.rstrip('/')}/models", headers=headers)
        cards = reply.json().get("data") if reply.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return model_card(cards, model) if isinstance(cards, list) else None


def card_answer_format(card: Card | None) -> AnswerFormat | None:
    """The answer format the card says the model's answers are read in, if it says."""
    said = (card or {}).get("answer_format")
    return said if said in ANSWER_FORMATS else None


def card_concurrency(card: Card | None) -> int | None:
    """The runs the server executes at once, if the card says."""
    runs = (card or {}).get("max_concurrent_runs")
    return runs if isinstance(runs, int) and runs > 0 else None


def card_thinking(card: Card | None) -> ThinkingMarkers | None:
    """The model's thinking markers, if the card says."""
    return ThinkingMarkers.of((card or {}).get("thinking_markers"))
