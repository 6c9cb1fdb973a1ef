"""Every built-in scaffold through the Responses and Messages APIs (its defaults, a mock
engine): a ``message`` item / ``text`` block answers, after a ``reasoning`` item /
``thinking`` blocks when the scaffold took steps before its answer."""

from __future__ import annotations

import json
from typing import Any

import pytest

from scaffolds.spec.registry import builtin_registry
from tests.server.conftest import parse_sse


def events(text: str) -> list[dict[str, Any]]:
    """The ``data:`` payloads of an SSE body whose events also carry ``event:`` lines."""
    lines = "\n".join(line for line in text.splitlines() if not line.startswith("event: "))
    return [e for e in parse_sse(lines) if isinstance(e, dict)]


@pytest.mark.parametrize("name", builtin_registry().names())
async def test_every_scaffold_answers_both_apis(make_client: Any, name: str) -> None:
    if name in ("beam", "particle_filter"):  # searches need a verifier: the model itself
        name = f'{name}(verifier="m")'
    async with make_client() as (client, _):
        plain = await client.post(
            "/v1/responses", json={"model": "m", "input": "2+2?", "scaffold": name}
        )
        assert plain.status_code == 200, plain.text
        kinds = [item["type"] for item in plain.json()["output"]]
        assert kinds[-1] == "message" and set(kinds) <= {"reasoning", "message"}
        assert "\\boxed{4}" in plain.json()["output"][-1]["content"][0]["text"]
        # Messages' max_tokens bounds the whole run (thinking included, as Anthropic's
        # does): room for every step of the scaffold's defaults.
        body = {
            "model": "m",
            "max_tokens": 4096,
            "scaffold": name,
            "stream": True,
            "messages": [{"role": "user", "content": "2+2?"}],
        }
        streamed = await client.post("/v1/messages", json=body)
        assert streamed.status_code == 200
        sent = events(streamed.text)
        starts = [e["content_block"]["type"] for e in sent if e["type"] == "content_block_start"]
        assert starts[-1] == "text" and set(starts) <= {"thinking", "text"}
        assert (len(starts) > 1) == ("reasoning" in kinds), (starts, kinds)
        assert sent[-1] == {"type": "message_stop"}
        text = "".join(
            e["delta"].get("text", "") for e in sent if e["type"] == "content_block_delta"
        )
        assert "\\boxed{4}" in text, json.dumps(sent)[:500]
