"""Verifiers through the server: a served model named as a model's verifier, and a
reward model's process scores guiding a streamed beam search (uvicorn on loopback, the
fake engine, the openai SDK)."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from server.settings import Settings
from testing.fake_engine import FakeEngineConfig, running_fake_engine
from testing.ponder import running_ponder

MODEL = "fake-model"


def last_message(body: dict[str, Any]) -> dict[str, Any]:
    return body["messages"][-1]


def test_a_model_named_as_verifier_weighs_the_vote() -> None:
    def respond(body: dict[str, Any]) -> list[str]:
        text = last_message(body)["content"]
        if "### Proposed solution" in text:
            return ["yes" if "{42}" in text else "no"]
        return ["\\boxed{41}", "\\boxed{41}", "\\boxed{42}"][: int(body.get("n") or 1)]

    with running_fake_engine(FakeEngineConfig(respond=respond)) as fake:
        settings = Settings(model=MODEL, engines=(fake.base_url,), verifier=MODEL)
        with running_ponder(settings) as url:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
            reply = client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": "What is 6*7?"}],
                extra_body={"scaffold": 'majority(k=3, weight="verifier")', "return_trace": True},
            )
            with pytest.raises(openai.BadRequestError) as refused:
                client.chat.completions.create(
                    model=MODEL,
                    messages=[{"role": "user", "content": "What is 6*7?"}],
                    extra_body={"scaffold": 'beam(verifier="nobody")'},
                )
        bodies = [r.body for r in fake.state.requests]
    assert refused.value.body["param"] == "scaffold.verifier"  # type: ignore[index]
    # 41 has two votes, but the verifier says no to both (weight 0) and yes to 42.
    assert reply.choices[0].message.content == "\\boxed{42}"
    verdicts = [b for b in bodies if "### Proposed solution" in last_message(b)["content"]]
    assert len(verdicts) == 3
    assert all(b["max_tokens"] == 1 and b["top_logprobs"] == 20 for b in verdicts)
    assert reply.usage is not None and reply.usage.model_extra["engine_calls"] == 1 + 3  # type: ignore[index]
    trace = (reply.model_extra or {})["trace"]
    [note] = [e for e in trace if e["type"] == "step_note" and e["kind"] == "scores"]
    assert note["values"]["scores"] == [0.0, 0.0, 1.0]


def test_a_streamed_beam_search_guided_by_a_process_reward_model() -> None:
    def respond(body: dict[str, Any]) -> list[str]:
        last = last_message(body)
        partial = last["content"] if last["role"] == "assistant" else ""
        n = int(body.get("n") or 1)
        if not partial:  # a first step that runs into the separator: the path goes on
            return ["six sevens\n\nare", "guess\n\nis"][:n]
        return ["are \\boxed{42}", "are \\boxed{41}"][:n]

    def per_step(text: str) -> list[float]:
        steps = text.split("<extra_0>")[:-1]
        return [0.1 if ("guess" in s or "41" in s) else 0.9 for s in steps]

    config = FakeEngineConfig(respond=respond, reward=per_step)
    with running_fake_engine(config) as fake:
        pooling = fake.base_url.removesuffix("/v1") + "/pooling"
        settings = Settings(
            model=MODEL, engines=(fake.base_url,), reward_url=pooling, reward_step_tag="<extra_0>"
        )
        with running_ponder(settings) as url:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
            stream = client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": "What is 6*7?"}],
                extra_body={"scaffold": "beam(width=1, expand=2, max_steps=2)"},
                stream=True,
                stream_options={"include_usage": True},
            )
            content, reasoning, usage = "", "", None
            for chunk in stream:
                usage = chunk.usage or usage
                for choice in chunk.choices:
                    content += choice.delta.content or ""
                    reasoning += (choice.delta.model_extra or {}).get("reasoning_content") or ""
        paths = [r.path for r in fake.state.requests]
        continued = [r.body for r in fake.state.requests if r.path == "/v1/chat/completions"][1]
    assert content == "six sevens\n\nare \\boxed{42}"
    assert "### level 1" in reasoning and "six sevens" in reasoning
    assert continued["continue_final_message"] is True and continued["stop"] == ["\n\n"]
    # 2 steps of the search, and the reward model's 2 + 2 requests
    assert paths.count("/v1/chat/completions") == 2 and paths.count("/pooling") == 4
    assert usage is not None and usage.model_extra["engine_calls"] == 6  # type: ignore[index]
