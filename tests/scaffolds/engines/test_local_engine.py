"""LocalEngine on a tiny random Qwen2 (structure) and on the shipped addition model (text).

The random model checks what must hold for any model: n samples in one ``generate``,
token ids and logprobs that match the sampled tokens, stop strings, ``max_tokens``,
seeds, cancellation. The shipped model checks that it really adds. ``from_model`` is
checked on a live model the test owns (the training rollout's use): chat template,
logprobs under the sampling distribution, train mode restored, generation kwargs.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from scaffolds.engines.messages import chat
from scaffolds.engines.protocol import Engine, GenerateRequest, Message, SamplingParams
from scaffolds.errors import EngineError

pytest.importorskip("torch")
pytest.importorskip("transformers")

from scaffolds.engines.local import LocalEngine
from scaffolds.engines.local_generate import encode_prompt


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
        assert completion.stop_matched is False and not completion.ended_at_eos


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
    assert cut.stop_matched is True and not cut.ended_at_eos  # the stop string, not EOS
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
    from scaffolds.engines.protocol import EngineDelta, GenerateResult

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


async def test_local_fits_max_tokens_into_the_context(tiny_model_dir: Path) -> None:
    """max_model_len=40: "1+1=" (4 tokens) leaves 36, so max_tokens 300 runs as 36; a
    prompt of 40 tokens leaves none: every sample empty, cut short, no generation."""
    engine = LocalEngine(tiny_model_dir, threads=1, max_model_len=40)
    try:
        long = _sampled(n=2, max_tokens=300, extra={"ignore_eos": True})
        fitted = await engine.generate(GenerateRequest("1+1=", long))
        assert fitted.prompt_token_ids is not None and len(fitted.prompt_token_ids) == 4
        assert [c.completion_tokens for c in fitted.completions] == [36, 36]
        assert [c.finish_reason for c in fitted.completions] == ["length", "length"]
        started = engine.calls_started
        full = await engine.generate(GenerateRequest("1" * 40, long))
        assert full.no_room and full.usage.calls == 0 and engine.generated_tokens == 72
        assert [(c.text, c.finish_reason) for c in full.completions] == [("", "length")] * 2
        assert engine.calls_started == started + 1
    finally:
        await engine.aclose()


async def test_local_stream_is_token_by_token(tiny_engine: LocalEngine) -> None:
    """A 64-token answer arrives in at least 16 chunks, and the chunks add up to it."""
    from scaffolds.engines.protocol import EngineDelta, GenerateResult

    params = _sampled(n=1, max_tokens=64, extra={"ignore_eos": True})
    items = [item async for item in tiny_engine.stream(GenerateRequest("1+2=", params))]
    result = items[-1]
    assert isinstance(result, GenerateResult)
    assert result.completions[0].completion_tokens == 64
    chunks = [item.text for item in items[:-1] if isinstance(item, EngineDelta)]
    assert len(chunks) >= 16 and all(chunks)
    assert "".join(chunks) == result.completions[0].text


async def test_local_stream_holds_back_a_stop_string_and_copies_greedy_rows(
    tiny_engine: LocalEngine,
) -> None:
    """Greedy n=3 is one row streamed to all three samples; text past a stop string
    never streams, and each sample's chunks add up to its final text."""
    from scaffolds.engines.protocol import EngineDelta, GenerateResult

    greedy = _sampled(max_tokens=24, temperature=0.0, extra={"ignore_eos": True})
    probe = await tiny_engine.generate(GenerateRequest("5+5=", greedy))
    text = probe.completions[0].text
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    assert len(stop) == 2
    params = _sampled(n=3, max_tokens=24, temperature=0.0, stop=(stop,), extra={"ignore_eos": True})
    items = [item async for item in tiny_engine.stream(GenerateRequest("5+5=", params))]
    result = items[-1]
    assert isinstance(result, GenerateResult)
    expected = text[: text.index(stop)]
    for index in range(3):
        pieces = [d.text for d in items[:-1] if isinstance(d, EngineDelta) and d.index == index]
        assert "".join(pieces) == expected == result.completions[index].text


async def test_local_leaving_a_stream_cancels_the_call(tiny_model_dir: Path) -> None:
    engine = LocalEngine(tiny_model_dir, threads=1)
    try:
        params = _sampled(n=2, max_tokens=240, extra={"ignore_eos": True})
        stream = engine.stream(GenerateRequest("1+2=", params))
        async for _ in stream:
            break
        await stream.aclose()  # type: ignore[attr-defined]
        after = await engine.generate(GenerateRequest("1+2=", _sampled(n=1, max_tokens=3)))
        assert engine.generated_tokens - after.usage.completion_tokens < 2 * 240
    finally:
        await engine.aclose()


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
    from scaffolds.evaluation.addition_task import problems

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
    assert all(r.completions[0].ended_at_eos for r in results)  # no stop string: EOS
    correct = sum(text == p.answer for text, p in zip(texts, items, strict=True))
    assert correct / len(items) > 0.3, texts


def test_local_engine_is_exported_without_importing_torch() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from scaffolds.engines import LocalEngine; "
        "print(LocalEngine.__module__, 'torch' in sys.modules, 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["scaffolds.engines.local", "False", "False"]


def test_local_rejects_bad_options(tiny_model_dir: Path) -> None:
    with pytest.raises(ValueError, match="logprobs"):
        LocalEngine(tiny_model_dir, logprobs="scores")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="default_max_tokens"):
        LocalEngine(tiny_model_dir, default_max_tokens=0)


async def test_local_seeded_calls_leave_the_global_rng_alone(tiny_engine: LocalEngine) -> None:
    import torch

    before = torch.get_rng_state()
    await tiny_engine.generate(GenerateRequest("1+2=", _sampled(n=2)))
    assert torch.equal(torch.get_rng_state(), before)


# -- from_model: a live model the caller owns (how training samples its policy) ----------


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    """The training tests' tiny char-level Qwen2 (chat template ``u:...\\na:``), loaded."""
    from tests.training.tiny_model import build_tiny_model
    from training.common import load_model

    return load_model(build_tiny_model(tmp_path_factory.mktemp("chat-qwen2")), threads=1)


def test_from_model_chat_greedy_and_seed(live: tuple[Any, Any]) -> None:
    # Synchronous code driving the engine with asyncio.run, call after call (the trainer).
    import torch

    model, tokenizer = live
    engine = LocalEngine.from_model(model, tokenizer)
    assert engine.loaded and engine.model_dir is None and engine.logprobs == "sampling"
    chat_prompt = (Message("user", "1+2="),)
    greedy = SamplingParams(n=2, max_tokens=4, temperature=0.0, logprobs=True)
    result = asyncio.run(engine.generate(GenerateRequest(chat_prompt, greedy)))
    assert result.prompt_token_ids == tuple(encode_prompt(tokenizer, chat_prompt))
    assert tokenizer.decode(list(result.prompt_token_ids)) == "u:1+2=\na:"
    first, second = result.completions
    assert first.token_ids is not None
    assert first.token_ids == second.token_ids  # greedy
    assert first.text == tokenizer.decode(list(first.token_ids), skip_special_tokens=True)
    assert first.finish_reason in ("stop", "length")
    assert result.usage.calls == 1 and result.usage.prompt_tokens == len(result.prompt_token_ids)
    seeded = SamplingParams(n=1, max_tokens=6, seed=3, logprobs=True)
    a = asyncio.run(engine.generate(GenerateRequest("9", seeded))).completions[0]
    b = asyncio.run(engine.generate(GenerateRequest("9", seeded))).completions[0]
    assert a.token_ids is not None
    assert a.token_ids == b.token_ids
    asyncio.run(engine.aclose())
    assert not engine.loaded
    assert model(torch.tensor([[1, 2]])).logits.shape[1] == 2  # still the caller's model


@pytest.mark.parametrize("mode", ["sampling", "raw"])
async def test_from_model_logprobs_follow_the_mode(live: tuple[Any, Any], mode: str) -> None:
    import torch

    model, tokenizer = live
    engine = LocalEngine.from_model(model, tokenizer, logprobs=mode)  # type: ignore[arg-type]
    try:
        params = _sampled(n=3, max_tokens=6, temperature=0.5, logprobs=True)
        result = await engine.generate(GenerateRequest("12+3=", params))
    finally:
        await engine.aclose()
    assert result.prompt_token_ids is not None
    scale = 0.5 if mode == "sampling" else 1.0  # temperature divides the logits
    for completion in result.completions:
        assert completion.token_ids is not None and completion.logprobs is not None
        ids = torch.tensor([[*result.prompt_token_ids, *completion.token_ids]])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0].float()
        start = len(result.prompt_token_ids)
        expected = torch.log_softmax(logits[start - 1 : -1] / scale, dim=-1)
        expected = expected.gather(1, torch.tensor(completion.token_ids)[:, None]).squeeze(1)
        assert completion.logprobs == pytest.approx(expected.tolist(), abs=1e-3)


async def test_from_model_restores_train_mode_and_uses_its_options(
    live: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    model, tokenizer = live
    seen: list[tuple[bool, dict[str, Any]]] = []
    original = model.generate

    def recording(*args: Any, **kwargs: Any) -> Any:
        seen.append((bool(model.training), kwargs))
        return original(*args, **kwargs)

    monkeypatch.setattr(model, "generate", recording)
    options = {"top_k": 5, "repetition_penalty": 1.1}
    engine = LocalEngine.from_model(
        model, tokenizer, default_max_tokens=3, generation_kwargs=options
    )
    model.train()
    try:
        free = _sampled(n=2, max_tokens=None, extra={"ignore_eos": True})
        result = await engine.generate(GenerateRequest("1+1=", free))
        assert model.training  # restored after the call
        assert [c.completion_tokens for c in result.completions] == [3, 3]  # default_max_tokens
        own = free.replace(extra={"ignore_eos": True, "top_k": 2})
        await engine.generate(GenerateRequest("1+1=", own))
        await engine.generate(GenerateRequest("1+1=", free.replace(temperature=0.0)))
    finally:
        model.eval()
        await engine.aclose()
    assert [training for training, _ in seen] == [False, False, False]  # eval while sampling
    first, second, greedy = (kwargs for _, kwargs in seen)
    assert first["top_k"] == 5 and first["repetition_penalty"] == 1.1
    assert second["top_k"] == 2  # the request wins over generation_kwargs
    assert greedy["do_sample"] is False and "top_k" not in greedy
    assert greedy["repetition_penalty"] == 1.1
