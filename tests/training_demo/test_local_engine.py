"""LocalEngine on a tiny random Qwen2 (structure) and on the shipped addition model (text).

The random model checks what must hold for any model: n samples in one ``generate``,
token ids and logprobs that match the sampled tokens, stop strings, ``max_tokens``,
seeds, cancellation. The shipped model checks that it really adds.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from scaffolds.engine import Engine, GenerateRequest, SamplingParams, chat
from scaffolds.errors import EngineError, InvalidRequestError

pytest.importorskip("torch")
pytest.importorskip("transformers")

from scaffolds.engines.local import LocalEngine


def _count_generate_calls(engine: LocalEngine) -> list[int]:
    """Wrap the loaded model's ``generate``; the list gets the row count of each call."""
    model: Any = engine._model
    original = model.generate
    rows: list[int] = []

    def counting(*args: Any, **kwargs: Any) -> Any:
        rows.append(int(kwargs.get("num_return_sequences", 1)))
        return original(*args, **kwargs)

    model.generate = counting
    return rows


@pytest.fixture
async def tiny_engine(tiny_model_dir: Path) -> Any:
    engine = LocalEngine(tiny_model_dir, threads=1, max_batch=64)
    assert await engine.health()
    yield engine
    await engine.aclose()


def _sampled(n: int = 1, **changes: Any) -> SamplingParams:
    base: dict[str, Any] = {"n": n, "max_tokens": 12, "temperature": 1.0, "seed": 7}
    base.update(changes)
    return SamplingParams(**base)


async def test_local_engine_satisfies_the_engine_protocol(tiny_engine: LocalEngine) -> None:
    assert isinstance(tiny_engine, Engine)


async def test_local_n_samples_are_one_generate_call(tiny_engine: LocalEngine) -> None:
    calls = _count_generate_calls(tiny_engine)
    result = await tiny_engine.generate(GenerateRequest(chat("1+2="), _sampled(n=5)))
    assert calls == [5]
    assert len(result.completions) == 5
    assert result.usage.calls == 1
    assert result.usage.prompt_tokens == 4
    assert result.prompt_token_ids is not None and len(result.prompt_token_ids) == 4
    assert result.usage.completion_tokens == sum(c.completion_tokens for c in result.completions)


async def test_local_max_batch_splits_large_n(tiny_model_dir: Path) -> None:
    engine = LocalEngine(tiny_model_dir, threads=1, max_batch=2)
    try:
        assert await engine.health()
        calls = _count_generate_calls(engine)
        result = await engine.generate(GenerateRequest("1+2=", _sampled(n=5)))
        assert calls == [2, 2, 1]
        assert len(result.completions) == 5
    finally:
        await engine.aclose()


async def test_local_greedy_generates_once_and_copies(tiny_engine: LocalEngine) -> None:
    calls = _count_generate_calls(tiny_engine)
    result = await tiny_engine.generate(
        GenerateRequest("1+2=", SamplingParams(n=3, max_tokens=8, temperature=0.0))
    )
    assert calls == [1]
    assert len({c.text for c in result.completions}) == 1
    assert result.usage.completion_tokens == 3 * result.completions[0].completion_tokens


async def test_local_logprobs_match_the_sampled_tokens(tiny_engine: LocalEngine) -> None:
    import torch

    request = GenerateRequest("12+3=", _sampled(n=3, logprobs=True))
    result = await tiny_engine.generate(request)
    for completion in result.completions:
        assert completion.token_ids is not None and completion.logprobs is not None
        assert len(completion.token_ids) == completion.completion_tokens
        assert len(completion.logprobs) == completion.completion_tokens
        assert all(lp <= 0.0 for lp in completion.logprobs)
    # The logprobs are the model's own: recompute them with one forward pass.
    first = result.completions[0]
    assert result.prompt_token_ids is not None and first.token_ids is not None
    ids = torch.tensor([[*result.prompt_token_ids, *first.token_ids]])
    with torch.inference_mode():
        logits = tiny_engine._model(input_ids=ids).logits[0].float()
    start = len(result.prompt_token_ids)
    expected = torch.log_softmax(logits[start - 1 : -1], dim=-1)
    expected = expected.gather(1, torch.tensor(first.token_ids)[:, None]).squeeze(1)
    assert first.logprobs == pytest.approx(expected.tolist(), abs=1e-3)


async def test_local_without_logprobs_returns_no_ids(tiny_engine: LocalEngine) -> None:
    result = await tiny_engine.generate(GenerateRequest("1+2=", _sampled()))
    assert result.completions[0].token_ids is None
    assert result.completions[0].logprobs is None


async def test_local_max_tokens_finishes_with_length(tiny_engine: LocalEngine) -> None:
    params = _sampled(n=2, max_tokens=9, extra={"ignore_eos": True})
    result = await tiny_engine.generate(GenerateRequest("1+2=", params))
    for completion in result.completions:
        assert completion.finish_reason == "length"
        assert completion.truncated
        assert completion.completion_tokens == 9


async def test_local_stop_strings_cut_the_text(tiny_engine: LocalEngine) -> None:
    params = _sampled(max_tokens=30, extra={"ignore_eos": True}, logprobs=True)
    free = (await tiny_engine.generate(GenerateRequest("5+5=", params))).completions[0]
    stop = free.text[10:12]
    assert len(stop) == 2
    cut = (
        await tiny_engine.generate(GenerateRequest("5+5=", params.replace(stop=(stop, "@@@"))))
    ).completions[0]
    assert cut.text == free.text[: free.text.index(stop)]
    assert cut.finish_reason == "stop"
    assert cut.completion_tokens < free.completion_tokens
    assert cut.token_ids is not None and free.token_ids is not None
    assert cut.token_ids == free.token_ids[: len(cut.token_ids)]
    assert cut.logprobs is not None and len(cut.logprobs) == cut.completion_tokens


async def test_local_seed_makes_sampling_reproducible(tiny_engine: LocalEngine) -> None:
    async def texts(seed: int) -> list[str]:
        request = GenerateRequest("7+8=", _sampled(n=4, seed=seed, max_tokens=16))
        return [c.text for c in (await tiny_engine.generate(request)).completions]

    first = await texts(1)
    assert await texts(1) == first
    assert await texts(2) != first


async def test_local_chat_prompt_is_the_plain_prompt(tiny_engine: LocalEngine) -> None:
    params = SamplingParams(max_tokens=6, temperature=0.0, logprobs=True)
    as_chat = await tiny_engine.generate(GenerateRequest(chat("347+589="), params))
    as_text = await tiny_engine.generate(GenerateRequest("347+589=", params))
    assert as_chat.prompt_token_ids == as_text.prompt_token_ids
    assert as_chat.completions[0].token_ids == as_text.completions[0].token_ids


async def test_local_stream_yields_deltas_then_the_result(tiny_engine: LocalEngine) -> None:
    from scaffolds.engine import EngineDelta, GenerateResult

    items = [item async for item in tiny_engine.stream(GenerateRequest("1+1=", _sampled(n=2)))]
    assert isinstance(items[-1], GenerateResult)
    deltas = [item for item in items[:-1] if isinstance(item, EngineDelta)]
    for index, completion in enumerate(items[-1].completions):
        assert "".join(d.text for d in deltas if d.index == index) == completion.text


async def test_local_cancelled_call_stops_early_and_later_calls_work(tiny_model_dir: Path) -> None:
    engine = LocalEngine(tiny_model_dir, threads=1)
    try:
        assert await engine.health()
        long = GenerateRequest("1+2=", _sampled(n=8, max_tokens=240, extra={"ignore_eos": True}))
        task = asyncio.create_task(engine.generate(long))
        deadline = time.monotonic() + 30
        while engine.calls_started < 1 and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.005)
        queued = asyncio.create_task(engine.generate(long))
        await asyncio.sleep(0.01)
        queued.cancel()  # cancelled while it waits behind the running call: never runs
        task.cancel()
        for cancelled in (task, queued):
            with pytest.raises(asyncio.CancelledError):
                await cancelled
        after = await engine.generate(GenerateRequest("1+2=", _sampled(n=2, max_tokens=5)))
        assert engine.calls_started == 2
        assert [c.completion_tokens <= 5 for c in after.completions] == [True, True]
        cancelled_tokens = engine.generated_tokens - after.usage.completion_tokens
        assert cancelled_tokens < 8 * 240
    finally:
        await engine.aclose()


async def test_local_close_ends_running_and_queued_calls(tiny_model_dir: Path) -> None:
    engine = LocalEngine(tiny_model_dir, threads=1)
    assert await engine.health()
    long = GenerateRequest("1+2=", _sampled(n=4, max_tokens=240, extra={"ignore_eos": True}))
    running = asyncio.create_task(engine.generate(long))
    while engine.calls_started < 1:  # noqa: ASYNC110
        await asyncio.sleep(0.005)
    queued = asyncio.create_task(engine.generate(long))
    await asyncio.sleep(0.01)
    await asyncio.wait_for(engine.aclose(), timeout=30)
    for call in (running, queued):
        with pytest.raises(EngineError):
            await call
    assert engine.generated_tokens < 4 * 240


async def test_local_concurrent_calls_queue(tiny_engine: LocalEngine) -> None:
    requests = [GenerateRequest(f"{i}+1=", _sampled(n=2, seed=i)) for i in range(6)]
    results = await asyncio.gather(*(tiny_engine.generate(r) for r in requests))
    assert [len(r.completions) for r in results] == [2] * 6
    alone = await tiny_engine.generate(requests[3])
    assert [c.text for c in alone.completions] == [c.text for c in results[3].completions]


async def test_local_rejects_prompts_over_the_context(tiny_engine: LocalEngine) -> None:
    with pytest.raises(InvalidRequestError):
        await tiny_engine.generate(GenerateRequest("1" * 300, _sampled()))
    with pytest.raises(InvalidRequestError):
        await tiny_engine.generate(GenerateRequest("1+1=", _sampled(max_tokens=300)))


async def test_local_health_and_close(tmp_path: Path, tiny_model_dir: Path) -> None:
    missing = LocalEngine(tmp_path / "nothing-here")
    assert not await missing.health()
    await missing.aclose()
    engine = LocalEngine(tiny_model_dir)
    await engine.aclose()
    assert not await engine.health()
    with pytest.raises(EngineError):
        await engine.generate(GenerateRequest("1+1=", _sampled()))


async def test_shipped_model_adds_through_local_engine(shipped_model_dir: Path) -> None:
    from training.demo.task import problems

    items = problems("test", 50)
    engine = LocalEngine(shipped_model_dir, threads=1)
    try:
        params = SamplingParams(max_tokens=8, temperature=0.0)
        results = await asyncio.gather(
            *(engine.generate(GenerateRequest(chat(p.problem), params)) for p in items)
        )
    finally:
        await engine.aclose()
    texts = [r.completions[0].text for r in results]
    assert all(r.completions[0].finish_reason == "stop" for r in results)
    correct = sum(text == p.answer for text, p in zip(texts, items, strict=True))
    assert correct / len(items) > 0.3, texts
