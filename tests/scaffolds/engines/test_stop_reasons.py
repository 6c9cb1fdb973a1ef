"""How a sample stopped, as each server says it: vLLM's ``stop_reason`` (the stop string,
a stop token id, or null at end of sequence), SGLang's ``matched_stop`` (the string, or
the EOS token id), and nothing at all from a plain OpenAI server."""

from __future__ import annotations

from typing import Any

import pytest

from scaffolds.engines.openai_parse import Choice, ResponseParser
from scaffolds.engines.protocol import Completion


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
        [{"index": 0, "text": "12 *", "finish_reason": None, "stop_reason": None},
         {"index": 1, "text": "Let", "finish_reason": None, "stop_reason": None}],
        [{"index": 0, "text": " 4 = 48", "finish_reason": "stop", "stop_reason": None},
         {"index": 1, "text": " me think", "finish_reason": None, "stop_reason": None}],
        [{"index": 1, "text": "", "finish_reason": "stop", "stop_reason": "\n\n"}],
    ]  # fmt: skip
    for chunk in chunks:
        parser.absorb({"choices": chunk}, accs, None)
    answer, thought = parser.result(2, accs, parser.usage(None), None).completions
    assert (answer.text, answer.stop_matched, answer.ended_at_eos) == ("12 * 4 = 48", False, True)
    assert (thought.text, thought.stop_matched) == ("Let me think", True)
    assert not thought.ended_at_eos
