"""its_hub's documented beam search and particle filtering through the server, as the
README's rows give them (uvicorn on loopback, the fake engine serving both the policy
and a process reward model behind the pooling API, the openai SDK)."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from server.settings import Settings
from testing.fake_engine import FakeEngineConfig, running_fake_engine
from testing.ponder import running_ponder

MODEL = "fake-model"
SPECS = {
    "beam": (
        'beam(semantics="its_hub", width=4, budget=32, max_steps=32, aggregate="prod", '
        "temperature=0.8)"
    ),
    "particle_filter": (
        'particle_filter(semantics="its_hub", n=8, max_steps=32, aggregate="prod", temperature=0.8)'
    ),
}


def respond(body: dict[str, Any]) -> list[str]:
    """First steps alternate a good one and a guess; a second step boxes 42 or 41."""
    last = body["messages"][-1]
    partial = last["content"] if last["role"] == "assistant" else ""
    n = int(body.get("n") or 1)
    if not partial:
        return [("six sevens\n\nare", "guess\n\nis")[i % 2] for i in range(n)]
    return [("are \\boxed{42}", "are \\boxed{41}")[i % 2] for i in range(n)]


def per_step(text: str) -> list[float]:
    steps = text.split("<extra_0>")[:-1]
    return [0.1 if ("guess" in s or "41" in s) else 0.9 for s in steps]


@pytest.mark.parametrize("name", sorted(SPECS))
def test_its_hub_documented_settings_run_through_the_server(name: str) -> None:
    """Beam: 8 first steps (budget 32 / width 4), the 4 best kept (the good first step,
    0.9) and each continued 8 ways (4 requests of n=8), 32 paths scored; the best by
    prod, 0.9 * 0.9 = 0.81, boxes 42 and every kept path has ``\\boxed``: 5 policy
    calls, 8 + 32 reward calls. Particle filtering ends the same way, its particles
    resampled. Every step is sampled at 0.8, and the cap must allow the plan."""
    config = FakeEngineConfig(respond=respond, reward=per_step)
    with running_fake_engine(config) as fake:
        pooling = fake.base_url.removesuffix("/v1") + "/pooling"
        settings = Settings(
            model=MODEL,
            engines=(fake.base_url,),
            reward_url=pooling,
            reward_step_tag="<extra_0>",
            spec_max_calls=1185,
        )
        with running_ponder(settings) as url:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
            reply = client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": "What is 6*7?"}],
                extra_body={"scaffold": SPECS[name]},
            )
        steps = [r.body for r in fake.state.requests if r.path == "/v1/chat/completions"]
        rewards = [r for r in fake.state.requests if r.path == "/pooling"]
    assert reply.choices[0].message.content == "six sevens\n\nare \\boxed{42}"
    assert steps and all(b["temperature"] == 0.8 and b["stop"] == ["\n\n"] for b in steps)
    if name == "beam":
        assert [int(b.get("n") or 1) for b in steps] == [8, 8, 8, 8, 8]
        assert len(rewards) == 8 + 32
        assert reply.usage is not None
        assert reply.usage.model_extra["engine_calls"] == 5 + 40  # type: ignore[index]


def test_the_documented_beam_search_needs_the_raised_cap() -> None:
    """1185 planned calls: over the default ``--spec-max-calls`` of 256, a 400."""
    with running_fake_engine(FakeEngineConfig(respond=respond, reward=per_step)) as fake:
        pooling = fake.base_url.removesuffix("/v1") + "/pooling"
        settings = Settings(model=MODEL, engines=(fake.base_url,), reward_url=pooling)
        with running_ponder(settings) as url:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
            with pytest.raises(openai.BadRequestError) as refused:
                client.chat.completions.create(
                    model=MODEL,
                    messages=[{"role": "user", "content": "What is 6*7?"}],
                    extra_body={"scaffold": SPECS["beam"]},
                )
    assert "1185" in str(refused.value)
