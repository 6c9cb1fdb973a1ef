"""LocalEngine's top logprobs (deepconf) and message continuation (budget forcing), on a
tiny random Qwen2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scaffolds import RunSettings, solve
from scaffolds.core.trace import StepNote
from scaffolds.engines.local import LocalEngine
from scaffolds.engines.local_generate import encode_prompt
from scaffolds.engines.messages import chat
from scaffolds.engines.protocol import GenerateRequest, Message, SamplingParams

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture
async def engine(tiny_model_dir: Path) -> Any:
    engine = LocalEngine(tiny_model_dir, threads=1, max_batch=8)
    yield engine
    await engine.aclose()


async def test_top_logprobs_per_position_best_first(engine: LocalEngine) -> None:
    params = SamplingParams(n=3, max_tokens=6, temperature=1.0, seed=1, top_logprobs=4)
    result = await engine.generate(GenerateRequest("1+2=", params))
    for completion in result.completions:
        assert completion.top_logprobs is not None and completion.logprobs is None
        assert len(completion.top_logprobs) == completion.completion_tokens
        for top in completion.top_logprobs:
            assert len(top) == 4 and list(top) == sorted(top, reverse=True)
            assert all(v <= 0.0 for v in top)


async def test_deepconf_runs_on_the_local_engine(engine: LocalEngine) -> None:
    params = SamplingParams(max_tokens=6, temperature=1.0, seed=2)
    result = await solve("deepconf(n=4, top_k=3)", "1+2=", engine, RunSettings(params=params))
    [note] = [e for e in result.events if isinstance(e, StepNote)]
    assert len(note.values["confidence"]) == 4 and sum(note.values["kept"]) == 2


def test_a_continued_message_ends_inside_the_assistant_turn(tiny_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    if not getattr(tokenizer, "chat_template", None):
        pytest.skip("the tiny tokenizer has no chat template")
    prompt = (*chat("1+2="), Message("assistant", "12+3"))
    opened = encode_prompt(tokenizer, prompt, continue_final=True)
    assert tokenizer.decode(opened).endswith("12+3")
