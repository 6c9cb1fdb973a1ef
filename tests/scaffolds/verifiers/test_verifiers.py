"""The three verifiers: vLLM's pooling API (against a fake that answers in vLLM's
``PoolingResponse`` shape), a served model's yes/no logprobs, a transformers model in
process (SmolLM2-135M-Instruct, prepared from its wheel)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from scaffolds.engines.mock import MockEngine
from scaffolds.engines.openai_http import OpenAIEngine
from scaffolds.engines.protocol import (
    Completion,
    GenerateRequest,
    GenerateResult,
    Usage,
    Verifier,
)
from scaffolds.errors import EngineUnavailableError
from scaffolds.verifiers import GenerativeVerifier, LocalVerifier, PoolingVerifier
from scaffolds.verifiers.generative import yes_probability
from testing.fake_engine import FakeEngineConfig, running_fake_engine


async def test_pooling_verifier_scores_each_candidate_and_counts_its_requests() -> None:
    config = FakeEngineConfig(reward=lambda text: 10.0 if "42" in text else 1.0)
    with running_fake_engine(config) as fake:
        url = fake.base_url.removesuffix("/v1") + "/pooling"
        verifier = PoolingVerifier(url, "rm", api_key="rm-key")
        try:
            verdicts = await verifier.verify("6*7?", ["41", "it is 42", "43"])
        finally:
            await verifier.aclose()
        requests = list(fake.state.requests)
    assert verdicts.scores == (1.0, 10.0, 1.0) and verdicts.steps is None
    # vLLM's usage: prompt tokens (the fake counts words: "6*7?" and the candidate)
    assert verdicts.usage == Usage(prompt_tokens=(1 + 1) + (1 + 3) + (1 + 1), calls=3)
    # One request per candidate, all at once (so in any order)
    assert sorted(r.body["messages"][1]["content"] for r in requests) == ["41", "43", "it is 42"]
    assert {
        "model": "rm",
        "messages": [{"role": "user", "content": "6*7?"}, {"role": "assistant", "content": "41"}],
    } in [r.body for r in requests]
    assert all(r.headers["authorization"] == "Bearer rm-key" for r in requests)
    assert verifier.requests(3) == 3 and isinstance(verifier, Verifier)


async def test_a_process_reward_model_scores_each_tagged_step() -> None:
    def per_step(text: str) -> list[float]:
        return [0.9 if "ok" in s else 0.2 for s in text.split("<extra_0>")[:-1]]

    with running_fake_engine(FakeEngineConfig(reward=per_step)) as fake:
        url = fake.base_url.removesuffix("/v1") + "/pooling"
        verifier = PoolingVerifier(url, "prm", step_tag="<extra_0>")
        try:
            verdicts = await verifier.verify("p", ["ok 1\n\nbad 2", "ok 3"], step="\n\n")
        finally:
            await verifier.aclose()
        sent = [r.body["messages"][1]["content"] for r in fake.state.requests]
    assert sorted(sent) == ["ok 1<extra_0>bad 2<extra_0>", "ok 3<extra_0>"]
    # Each step's row is [p(bad), p(good)]; the outcome is the last step's.
    assert verdicts.steps == ((0.9, 0.2), (0.9,))
    assert verdicts.scores == (0.2, 0.9)


async def test_the_pooling_verifier_reports_an_unreachable_endpoint() -> None:
    verifier = PoolingVerifier("http://127.0.0.1:9/pooling", "rm", timeout=2)
    with pytest.raises(EngineUnavailableError, match="unreachable"):
        await verifier.verify("p", ["c"])
    await verifier.aclose()


def test_yes_probability_reads_the_yes_and_no_mass_of_the_top_tokens() -> None:
    tops = {"Yes": math.log(0.6), " yes": math.log(0.1), "No": math.log(0.2), "I": -3.0}
    completions_form = {"logprobs": {"tokens": ["Yes"], "top_logprobs": [tops]}}
    assert yes_probability(Completion("Yes", extra=completions_form)) == pytest.approx(0.7 / 0.9)
    # No top tokens (an in-process engine): the sampled token and its logprob.
    assert yes_probability(Completion("Yes", logprobs=(math.log(0.8),))) == pytest.approx(0.8)
    assert yes_probability(Completion("No", logprobs=(math.log(0.8),))) == pytest.approx(0.2)
    assert yes_probability(Completion("Maybe")) == 0.5


class ListEngine(MockEngine):
    """A MockEngine that takes a list of text prompts as one request (as vLLM's
    /v1/completions does)."""

    takes_prompt_lists = True

    def __init__(self) -> None:
        super().__init__(lambda r: "yes")
        self.batches: list[list[str]] = []

    async def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        self.batches.append([r.prompt_text() for r in requests])
        usage = Usage(prompt_tokens=5, completion_tokens=1, calls=1)
        no = math.log(0.25)
        return [
            GenerateResult((Completion("no", completion_tokens=1, logprobs=(no,)),), usage)
            for _ in requests
        ]


async def test_text_prompts_on_a_list_engine_are_one_request_per_batch() -> None:
    engine = ListEngine()
    verifier = GenerativeVerifier(engine, "v", chat=False)
    verdicts = await verifier.verify("2+2?", ["4", "5", "6"])
    assert verifier.requests(3) == 1 and len(engine.batches) == 1
    assert engine.batches[0][1].startswith("### Problem\n2+2?\n\n### Proposed solution\n5")
    assert verdicts.scores == pytest.approx((0.75, 0.75, 0.75))
    assert engine.requests == []  # nothing went one by one


@pytest.mark.parametrize("chat", [True, False], ids=["chat", "text"])
@pytest.mark.parametrize(("word", "score"), [("Yes", 1.0), ("No", 0.0)])
async def test_a_served_verifier_asks_vllm_for_its_top_tokens_by_text(
    chat: bool, word: str, score: float
) -> None:
    # Deepconf's top logprobs come keyed by token id (token_id:N), which the verdict
    # cannot read: the verifier's own request keeps them keyed by text.
    config = FakeEngineConfig(respond=lambda body: [word] * int(body.get("n") or 1))
    with running_fake_engine(config) as fake:
        async with OpenAIEngine(fake.base_url, config.model, max_retries=0) as engine:
            verdicts = await GenerativeVerifier(engine, "v", chat=chat).verify("2+2?", ["4"])
        [request] = fake.state.requests
    assert "return_tokens_as_token_ids" not in request.body
    assert (request.body["top_logprobs"] if chat else request.body["logprobs"]) == 20
    assert verdicts.scores == (score,)


@pytest.fixture(scope="module")
def smollm2_dir() -> str:
    pytest.importorskip("transformers")
    from scaffolds.models.prepare import prepare_model

    return str(prepare_model("smollm2-135m-instruct"))


async def test_the_local_verifier_scores_a_batch_in_one_forward_pass(smollm2_dir: str) -> None:
    verifier = LocalVerifier(smollm2_dir)
    try:
        verdicts = await verifier.verify(
            "What is 2 + 3?", ["2 + 3 = 5. The answer is 5.", "2 + 3 = 7. The answer is 7."]
        )
        alone = await verifier.verify("What is 2 + 3?", ["2 + 3 = 7. The answer is 7."])
    finally:
        await verifier.aclose()
    assert len(verdicts.scores) == 2 and all(0.0 < s < 1.0 for s in verdicts.scores)
    assert verdicts.usage.calls == 1 and verdicts.usage.completion_tokens == 0
    assert verdicts.usage.prompt_tokens > 2 * 20
    # Left padding leaves the shorter row's score as it is alone.
    assert alone.scores[0] == pytest.approx(verdicts.scores[1], abs=1e-4)


async def test_the_local_verifier_takes_a_known_models_name(smollm2_dir: str) -> None:
    """``local:NAME`` names a known model (prepared on first use); a name that is neither
    a folder nor a known model is refused when the server reads its config."""
    from scaffolds.errors import InvalidRequestError
    from server.model_settings import ModelConfig
    from server.pool.served_models import model_verifier

    config = ModelConfig(
        name="m", engines=("http://127.0.0.1:9/v1",), verifier="local:smollm2-135m-instruct"
    )
    verifier = model_verifier(config, {}, "models.m.verifier")
    assert isinstance(verifier, LocalVerifier)
    try:
        verdicts = await verifier.verify("What is 2 + 3?", ["5", "7"])
    finally:
        await verifier.aclose()
    assert len(verdicts.scores) == 2 and verdicts.usage.calls == 1
    unknown = config.model_copy(update={"verifier": "local:no-such-model"})
    with pytest.raises(InvalidRequestError) as refused:
        model_verifier(unknown, {}, "models.m.verifier")
    assert refused.value.param == "models.m.verifier"
    assert (
        "no-such-model" in refused.value.message
        and "smollm2-135m-instruct" in refused.value.message
    )
