"""Each call's ``max_tokens`` fits the model's context: configured or reported, counted by
vLLM's ``/tokenize`` or bounded, and a prompt with no room left is cut short, not sent."""

from __future__ import annotations

import json
from typing import Any

import httpx

from scaffolds import RunSettings, solve
from scaffolds.engines.messages import chat
from scaffolds.engines.openai_http import OpenAIEngine
from scaffolds.engines.protocol import GenerateRequest, SamplingParams

URL = "http://engine.test/v1"


class FakeServer:
    """A vLLM-like server: /v1/models with ``max_model_len``, /tokenize, completions."""

    def __init__(self, *, context: int | None = 1024, prompt_tokens: int = 300) -> None:
        self.context = context
        self.prompt_tokens = prompt_tokens
        self.seen: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        if request.url.path == "/v1/models":
            card: dict[str, Any] = {"id": "m", "object": "model"}
            if self.context is not None:
                card["max_model_len"] = self.context
            return httpx.Response(200, json={"object": "list", "data": [card]})
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"count": self.prompt_tokens, "tokens": []})
        message = {"role": "assistant", "content": "ok"}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        usage = {"prompt_tokens": self.prompt_tokens, "completion_tokens": 1}
        return httpx.Response(200, json={"choices": [choice], "usage": usage})

    def generation_bodies(self) -> list[dict[str, Any]]:
        return [
            json.loads(r.content) for r in self.seen if r.url.path.endswith("/chat/completions")
        ]

    def paths(self) -> list[str]:
        return [r.url.path for r in self.seen]


def _engine(server: FakeServer, **kwargs: Any) -> OpenAIEngine:
    client = httpx.AsyncClient(transport=httpx.MockTransport(server))
    return OpenAIEngine(URL, "m", client=client, max_retries=0, **kwargs)


def _ask(max_tokens: int | None, n: int = 1) -> GenerateRequest:
    return GenerateRequest(chat("Think hard."), SamplingParams(n=n, max_tokens=max_tokens))


async def test_max_tokens_is_lowered_to_the_room_the_counted_prompt_leaves() -> None:
    server = FakeServer(context=1024, prompt_tokens=300)
    engine = _engine(server)
    for _ in range(3):
        await engine.generate(_ask(16384))
    assert [b["max_tokens"] for b in server.generation_bodies()] == [724] * 3
    assert server.paths().count("/v1/models") == 1  # looked up once


async def test_a_configured_context_wins_and_small_calls_go_out_unchecked() -> None:
    server = FakeServer(context=None, prompt_tokens=100)
    engine = _engine(server, max_model_len=600)
    await engine.generate(_ask(2000))
    assert server.generation_bodies()[-1]["max_tokens"] == 500
    assert "/v1/models" not in server.paths()
    small = _engine(server2 := FakeServer(context=1024))
    await small.generate(_ask(64))
    assert server2.paths() == ["/v1/chat/completions"]  # no look-up, no count


async def test_a_prompt_with_no_room_left_is_cut_short_without_a_call() -> None:
    server = FakeServer(context=1024, prompt_tokens=1024)
    engine = _engine(server)
    result = await engine.generate(_ask(4096, n=3))
    assert [c.text for c in result.completions] == ["", "", ""]
    assert {c.finish_reason for c in result.completions} == {"length"}
    assert result.usage.calls == 0 and server.generation_bodies() == []
    items = [item async for item in engine.stream(_ask(4096))]
    assert len(items) == 1 and items[0].completions[0].finish_reason == "length"  # type: ignore[union-attr]


async def test_without_a_count_route_the_prompt_is_bounded() -> None:
    server = FakeServer(context=1024)
    engine = _engine(server, dialect="sglang")
    await engine.generate(_ask(4096))
    [body] = server.generation_bodies()
    assert "/tokenize" not in server.paths()
    assert 0 < body["max_tokens"] < 1024 - len("Think hard.")


async def test_a_failing_look_up_never_fails_the_call() -> None:
    def broken(request: httpx.Request) -> httpx.Response:
        if request.url.path != "/v1/chat/completions":
            return httpx.Response(500, text="no")
        return FakeServer()(request)

    client = httpx.AsyncClient(transport=httpx.MockTransport(broken))
    engine = OpenAIEngine(URL, "m", client=client, max_retries=0)
    result = await engine.generate(_ask(16384))
    assert result.completions[0].text == "ok"


class LongRefineServer(FakeServer):
    """Candidates fit; the refine prompt (which quotes them) counts past the context."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/tokenize":
            long = "Candidate" in request.content.decode()
            return httpx.Response(200, json={"count": 2000 if long else 50, "tokens": []})
        if request.url.path.endswith("/chat/completions"):
            self.seen.append(request)
            n = json.loads(request.content).get("n", 1)
            texts = ["So \\boxed{12}.", "So \\boxed{12}.", "So \\boxed{7}."][:n]
            choices = [
                {
                    "index": i,
                    "message": {"role": "assistant", "content": t},
                    "finish_reason": "stop",
                }
                for i, t in enumerate(texts)
            ]
            usage = {"prompt_tokens": 50, "completion_tokens": 5 * n}
            return httpx.Response(200, json={"choices": choices, "usage": usage})
        return super().__call__(request)


async def test_a_final_step_that_no_longer_fits_falls_back_to_what_the_run_has() -> None:
    # gsr's refine prompt fills the context: the run answers with the candidates' vote,
    # cut short for "context", instead of an empty refine (or an engine 400).
    server = LongRefineServer(context=1024)
    engine = _engine(server)
    result = await solve(
        "gsr(n=3)", "What is 3 * 4?", engine, RunSettings(params=SamplingParams(max_tokens=900))
    )
    [solution] = result.solutions
    assert (solution.answer, solution.cut_short, result.cut_reason) == ("12", True, "context")
    assert len(server.generation_bodies()) == 1  # the refine was never sent
    refine = [e for e in result.events if getattr(e, "kind", None) == "refine"]
    assert refine  # the cut step is still in the trace
