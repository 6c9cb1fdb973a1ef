"""A reward model behind vLLM's pooling API (``vllm serve RM --runner pooling``).

:class:`PoolingVerifier` posts each candidate as the conversation ``[user: problem,
assistant: candidate]`` to ``POST /pooling`` (its chat form takes one conversation per
request, so a batch is that many requests, in parallel). vLLM answers
``{"data": [{"index": 0, "object": "pooling", "data": ...}], "usage": {...}}`` where
``data`` is one number, a list of numbers, or a list of rows:

- an outcome reward model (pooling ``LAST``/``CLS``) gives one value per sequence: the
  score is the last number;
- a process reward model (pooling ``STEP``, e.g. Qwen2.5-Math-PRM with its
  ``step_tag_id``) gives one row per step tag, ``[p(bad), p(good)]``: each step's score
  is its row's last number and the outcome is the last step's. With ``step_tag`` set,
  a partial solution's steps are each followed by that tag (``<extra_0>`` for
  Qwen2.5-Math-PRM), so the model scores every step.

>>> last_number([[0.1, 0.2], [0.3, 0.9]]), row_scores([[0.1, 0.9], [0.7, 0.3]])
(0.9, (0.9, 0.3))
>>> tagged("a\\n\\nb", "\\n\\n", "<extra_0>")
'a<extra_0>b<extra_0>'
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any

import httpx

from scaffolds.engines.protocol import Usage, Verdicts
from scaffolds.errors import EngineError, EngineUnavailableError

__all__ = ["PoolingVerifier", "last_number", "row_scores", "tagged"]


class PoolingVerifier:
    """A reward model at ``url``, the full endpoint (``http://host:8002/pooling``)."""

    generated_tokens = 0

    def __init__(
        self,
        url: str,
        model: str,
        *,
        api_key: str | None = None,
        step_tag: str | None = None,
        timeout: float = 60.0,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.url = url
        self.model = model
        self.name = f"pooling:{model}"
        self.step_tag = step_tag
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client or httpx.AsyncClient(timeout=timeout)

    def requests(self, count: int) -> int:
        return count

    async def verify(
        self, problem: str, candidates: Sequence[str], *, step: str | None = None
    ) -> Verdicts:
        answers = await asyncio.gather(*(self._score_one(problem, c, step) for c in candidates))
        steps = tuple(rows for _, rows, _ in answers)
        usage = sum((u for _, _, u in answers), Usage())
        return Verdicts(tuple(s for s, _, _ in answers), steps if step else None, usage)

    async def _score_one(
        self, problem: str, candidate: str, step: str | None
    ) -> tuple[float, tuple[float, ...], Usage]:
        content = tagged(candidate, step, self.step_tag) if step and self.step_tag else candidate
        body = {
            "model": self.model,
            "messages": [
                {"role": "user", "content": problem},
                {"role": "assistant", "content": content},
            ],
        }
        try:
            response = await self._client.post(self.url, json=body, headers=self._headers)
        except httpx.HTTPError as exc:
            raise EngineUnavailableError(f"reward model {self.url} unreachable: {exc}") from exc
        if not response.is_success:
            raise EngineError(
                f"reward model {self.url} answered HTTP {response.status_code}: "
                f"{response.text[:300]}",
                status=response.status_code,
            )
        try:
            payload = response.json()
            data = payload["data"][0]["data"]
            score, rows = last_number(data), row_scores(data)
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise EngineError(f"reward model {self.url} sent no score: {exc}") from exc
        raw = payload.get("usage") or {}
        prompt = raw.get("prompt_tokens") if isinstance(raw, dict) else None
        return score, rows, Usage(prompt_tokens=int(prompt or 0), calls=1)

    async def aclose(self) -> None:
        await self._client.aclose()


def tagged(candidate: str, step: str, tag: str) -> str:
    """A partial solution with ``tag`` after each of its ``step``-separated steps."""
    return "".join(part + tag for part in candidate.split(step))


def row_scores(data: Any) -> tuple[float, ...]:
    """Per-step scores: each row's last number (a flat list or a number is one step)."""
    if isinstance(data, list) and data and all(isinstance(row, list) for row in data):
        return tuple(last_number(row) for row in data)
    return (last_number(data),)


def last_number(data: Any) -> float:
    """The last finite number in a (nested) list, or a number itself."""
    if isinstance(data, bool):
        raise ValueError("a boolean is not a score")
    if isinstance(data, int | float):
        if not math.isfinite(data):
            raise ValueError("the score is not finite")
        return float(data)
    if isinstance(data, list) and data:
        return last_number(data[-1])
    raise ValueError(f"no number in {data!r}")
