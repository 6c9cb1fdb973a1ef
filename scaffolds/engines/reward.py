"""Reward models: score candidate solutions (for ``best_of_n(judge="reward")``).

:class:`HTTPRewardModel` implements :class:`scaffolds.engines.protocol.RewardModel` over vLLM's
pooling API (a reward model served with ``--runner pooling``): one request per
candidate, the conversation ``[user: problem, assistant: candidate]``, and the score is
the last number of the pooled output (reward models return one value per token or one
per sequence; the last is the sequence's reward).

>>> last_number([[0.1, 0.2], [0.3, 0.9]])
0.9
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any

import httpx

from scaffolds.core.errors import EngineError, EngineUnavailableError


class HTTPRewardModel:
    """A reward model behind vLLM's ``POST /pooling`` endpoint.

    ``url`` is the full endpoint URL, e.g. ``http://host:8002/pooling``.
    """

    def __init__(
        self,
        url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.url = url
        self.model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client or httpx.AsyncClient(timeout=timeout)

    async def score(self, problem: str, candidates: Sequence[str]) -> list[float]:
        return list(await asyncio.gather(*(self._score_one(problem, c) for c in candidates)))

    async def _score_one(self, problem: str, candidate: str) -> float:
        body = {
            "model": self.model,
            "messages": [
                {"role": "user", "content": problem},
                {"role": "assistant", "content": candidate},
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
            value = last_number(response.json()["data"][0]["data"])
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise EngineError(f"reward model {self.url} sent no score: {exc}") from exc
        return value

    async def aclose(self) -> None:
        await self._client.aclose()


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
