"""How a sample stopped, as each server says it: vLLM's ``stop_reason`` (the stop string,
a stop token id, or null at end of sequence), SGLang's ``matched_stop`` (the string, or
the EOS token id), and nothing at all from a plain OpenAI server."""

from __future__ import annotations

from typing import Any

import pytest

from scaffolds.engines.openai_http import OpenAIEngine
from scaffolds.engines.openai_parse import Choice, ResponseParser
from scaffolds.engines.protocol import Completion, GenerateRequest, GenerateResult, SamplingParams
from testing.fake_engine import FakeEngineConfig, running_fake_engine


def parsed(choices: list[dict[str, Any]], part_key: str | None = None) -> list[Completion]:
    parser, accs = ResponseParser("http://engine/v1"), dict[int, Choice]()
    parser.absorb({"choices": choices}, accs, part_key)
    return list(parser.result(len(choices), accs, parser.usage(None), None).completions)


def text_choice(index: int, finish: str, **said: Any) -> dict[str, Any]:
    return {"index": index, "text": "12 * 4 = 48", "finish_reason": finish, **said}


@pytest.mark.parametrize(
    ("said", "finish", "matched", "at_eos"),
    [
        ({"stop_reason": None}, "stop", False, True),  # vLLM at EOS
        ({"stop_reason": "\n\n"}, "stop", True, False),  # vLLM at the step separator
        ({"stop_reason": 2}, "stop", False, True),  # vLLM at another EOS token (an id)
        ({"stop_reason": None}, "length", False, False),  # vLLM cut by max_tokens
        ({"matched_stop": 151645}, "stop", False, True),  # SGLang at EOS: its token id
        ({"matched_stop": "\n\n"}, "stop", True, False),  # SGLang at the separator
        ({}, "stop", None, False),  # a plain OpenAI server does not say
    ],
    ids=["vllm-eos", "vllm-sep", "vllm-token", "vllm-length", "sglang-eos", "sglang-sep", "openai"],
)
def test_a_whole_response_says_how_each_sample_stopped(
    said: dict[str, Any], finish: str, matched: bool | None, at_eos: bool
) -> None:
    [completion] = parsed([text_choice(0, finish, **said)])
    assert completion.finish_reason == finish
    assert completion.stop_matched is matched
    assert completion.ended_at_eos is at_eos


def test_chat_choices_and_several_samples_each_keep_their_own() -> None:
    message = {"role": "assistant", "content": "12 * 4 = 48"}
    choices = [
        {"index": 0, "message": message, "finish_reason": "stop", "stop_reason": None},
        {"index": 1, "message": message, "finish_reason": "stop", "stop_reason": "\n\n"},
    ]
    eos, separator = parsed(choices, "message")
    assert (eos.stop_matched, eos.ended_at_eos) == (False, True)
    assert (separator.stop_matched, separator.ended_at_eos) == (True, False)


def test_a_stream_reads_the_stop_from_the_chunk_that_finishes() -> None:
    """vLLM sends ``stop_reason: null`` on every chunk; only the last one's counts."""
    parser, accs = ResponseParser("http://engine/v1"), dict[int, Choice]()
    chunks = [
        [
            {"index": 0, "text": "12 *", "finish_reason": None, "stop_reason": None},
            {"index": 1, "text": "Let", "finish_reason": None, "stop_reason": None},
        ],
        [
            {"index": 0, "text": " 4 = 48", "finish_reason": "stop", "stop_reason": None},
            {"index": 1, "text": " me think", "finish_reason": None, "stop_reason": None},
        ],
        [{"index": 1, "text": "", "finish_reason": "stop", "stop_reason": "\n\n"}],
    ]
    for chunk in chunks:
        parser.absorb({"choices": chunk}, accs, None)
    answer, thought = parser.result(2, accs, parser.usage(None), None).completions
    assert (answer.text, answer.stop_matched, answer.ended_at_eos) == ("12 * 4 = 48", False, True)
    assert (thought.text, thought.stop_matched) == ("Let me think", True)
    assert not thought.ended_at_eos


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
@pytest.mark.parametrize("stream", [False, True])
async def test_over_http_each_dialects_word_reaches_the_completion(
    dialect: str, stream: bool
) -> None:
    """The fake engine answers as each server does: one sample runs into the separator,
    one ends on its own, one is cut by ``max_tokens``."""
    texts = ["Hmm.\n\nThen 48.", "48", "one two three four five six seven eight nine ten"]
    config = FakeEngineConfig(model="m", dialect=dialect, respond=lambda body: texts)  # type: ignore[arg-type]
    request = GenerateRequest(
        "12 * 4 =", SamplingParams(n=3, temperature=0.7, max_tokens=4, stop=("\n\n",))
    )
    with running_fake_engine(config) as fake:
        async with OpenAIEngine(fake.base_url, "m", dialect=dialect) as engine:  # type: ignore[arg-type]
            if stream:
                *_, result = [item async for item in engine.stream(request)]
                assert isinstance(result, GenerateResult)
            else:
                result = await engine.generate(request)
    separator, eos, cut = result.completions
    assert (separator.finish_reason, separator.stop_matched) == ("stop", True)
    assert (eos.finish_reason, eos.stop_matched, eos.ended_at_eos) == ("stop", False, True)
    assert (cut.finish_reason, cut.ended_at_eos) == ("length", False)
