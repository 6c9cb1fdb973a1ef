"""budget_forcing as s1 runs it: thinking stops at the served model's end-of-thinking
marker (nothing is written, or billed, past it), ``mode="ignore"`` suppresses it
``waits`` times, ``max_thinking_tokens`` caps the thinking, and one continuation after
the closed thinking writes the answer."""

from __future__ import annotations

import re

import pytest

from scaffolds.core.run import RunResult, run_scaffold
from scaffolds.core.run_settings import RunSettings
from scaffolds.core.thinking import Routing, Thinking
from scaffolds.core.trace import StepStarted
from scaffolds.engines.mock import MockEngine
from scaffolds.engines.protocol import Completion, GenerateRequest, Message, SamplingParams
from scaffolds.errors import SpecError
from scaffolds.evaluation.answers import ThinkingMarkers
from scaffolds.problem import Problem
from scaffolds.spec.build import build_strategy
from scaffolds.strategies import BudgetForcing

PROBLEM = Problem.from_messages((Message("user", "What is 6*7?"),))
S1 = Thinking(declared=True, markers=ThinkingMarkers("<|im_start|>think", "<|im_start|>answer"))
"""s1's chat format: its thinking ends where the answer section starts."""


class Writer:
    """A model that writes ``drafts[i]`` on call i, as an engine would: cut before the
    first of the request's stop strings and at its ``max_tokens`` (words are tokens)."""

    def __init__(self, *drafts: str) -> None:
        self.drafts = list(drafts)
        self.requests: list[GenerateRequest] = []

    def __call__(self, request: GenerateRequest) -> list[Completion]:
        self.requests.append(request)
        text, finish = self.drafts[len(self.requests) - 1], "stop"
        for stop in request.params.stop:
            text = text.partition(stop)[0]
        tokens, cap = re.findall(r"\s*\S+", text), request.params.max_tokens
        if cap is not None and len(tokens) > cap:
            text, finish = "".join(tokens[:cap]), "length"
        return [Completion(text, finish, None, len(text.split()))]

    def partials(self) -> list[str]:
        """The continued assistant messages (the first call's too, when it continues)."""
        return [r.prompt[-1].content for r in self.requests if r.continue_final]  # type: ignore[union-attr,index]


async def run(strategy: BudgetForcing, writer: Writer, thinking: Thinking = S1) -> RunResult:
    routing = Routing(thinking=thinking)
    return await run_scaffold(strategy, PROBLEM, MockEngine(writer), RunSettings(routing=routing))


def test_options_parse_and_round_trip() -> None:
    spec = 'budget_forcing(mode="ignore", waits=1, max_thinking_tokens=32000, cue="Wait")'
    strategy = build_strategy(spec)
    assert strategy == BudgetForcing(mode="ignore", waits=1, max_thinking_tokens=32000, cue="Wait")
    assert build_strategy(str(strategy)) == strategy
    for bad, field in [('mode="always"', "mode"), ("max_thinking_tokens=0", "max_thinking_tokens")]:
        with pytest.raises(SpecError) as info:
            build_strategy(f"budget_forcing({bad})")
        assert info.value.param == field


async def test_ignore_mode_suppresses_the_end_of_thinking_waits_times() -> None:
    # Each draft goes on past the marker; the engine stops there, so that part is never
    # generated. min_tokens=1 is long spent: ignore mode reopens all the same.
    marker = S1.markers.end
    writer = Writer(
        f"<|im_start|>think 6*7 is 42 {marker} The answer is 42.",
        f" let me check 7*6 {marker} dropped",
        f" yes 42 {marker} dropped too",
        " The answer is \\boxed{42}",
    )
    strategy = BudgetForcing(mode="ignore", waits=2, min_tokens=1, cue="Wait")
    result = await run(strategy, writer)
    assert [r.params.stop for r in writer.requests] == [(marker,)] * 3 + [()]
    assert [r.continue_final for r in writer.requests] == [False, True, True, True]
    thought = "<|im_start|>think 6*7 is 42 Wait let me check 7*6 Wait yes 42 "
    assert writer.partials() == [
        "<|im_start|>think 6*7 is 42 Wait",
        "<|im_start|>think 6*7 is 42 Wait let me check 7*6 Wait",
        thought + marker,  # the thinking closed with the model's own marker
    ]
    solution = result.solutions[0]
    assert solution.text == thought + marker + " The answer is \\boxed{42}"
    assert solution.answer == "42"
    # Billed: what was generated (4 + 4 + 2 + 4 words), none of the text past a marker.
    assert result.usage.completion_tokens == 14 and result.usage.calls == 4
    kinds = [(e.kind, e.label) for e in result.events if isinstance(e, StepStarted)]
    assert kinds == [
        ("generate", "answer"),
        ("continue", "wait 1"),
        ("continue", "wait 2"),
        ("continue", "answer"),
    ]


async def test_min_tokens_mode_reopens_only_a_short_thinking() -> None:
    writer = Writer(
        "<think> six sevens </think> 42", " no wait it is 42 </think> x", " \\boxed{42}"
    )
    strategy = BudgetForcing(min_tokens=5, waits=3)  # the default marker, </think>
    result = await run(strategy, writer, Thinking())
    # 3 tokens < 5: reopened once; 3 + 6 >= 5: closed, then the answer.
    assert len(writer.requests) == 3
    assert writer.partials()[-1] == "<think> six sevens \n\nWait no wait it is 42 </think>"
    assert result.solutions[0].answer == "42"


async def test_max_thinking_tokens_closes_the_thinking_and_forces_the_answer() -> None:
    marker = S1.markers.end
    writer = Writer(
        "<|im_start|>think a b c",  # 4 tokens, ends: reopened (ignore mode)
        " d e f g h i j k",  # gets 6 - 4 = 2 tokens: cut at the cap
        " \\boxed{7}",
    )
    strategy = BudgetForcing(mode="ignore", waits=3, max_thinking_tokens=6, cue="Wait")
    result = await run(strategy, writer)
    assert [r.params.max_tokens for r in writer.requests[:2]] == [6, 2]
    assert writer.partials()[-1] == "<|im_start|>think a b cWait d e" + marker
    assert len(writer.requests) == 3  # no more cues once the thinking is capped
    assert result.solutions[0].answer == "7"


async def test_a_reasoning_parser_keeps_the_thinking_in_its_channel() -> None:
    calls: list[GenerateRequest] = []

    def engine(request: GenerateRequest) -> list[Completion]:
        calls.append(request)
        if len(calls) == 1:
            return [Completion("", reasoning="six sevens", completion_tokens=2)]
        if len(calls) == 2:
            return [Completion("", reasoning=" no, 42", completion_tokens=2)]
        # The block was closed in the prompt, which the parser never sees: it calls
        # the answer reasoning.
        return [Completion("", reasoning="\\boxed{42}", completion_tokens=1)]

    strategy = BudgetForcing(min_tokens=50, waits=1)
    result = await run_scaffold(strategy, PROBLEM, MockEngine(engine))
    assert calls[2].prompt[-1] == Message(  # type: ignore[index]
        "assistant", "<think>\nsix sevens\n\nWait no, 42</think>"
    )
    solution = result.solutions[0]
    assert (solution.text, solution.reasoning) == ("\\boxed{42}", "six sevens\n\nWait no, 42")
    assert solution.answer == "42" and result.usage.completion_tokens == 5


async def test_the_requests_own_stop_strings_stay() -> None:
    writer = Writer("<|im_start|>think 6*7 is 42. So", " \\boxed{42}")
    strategy = BudgetForcing(waits=0)
    routing = Routing(thinking=S1)
    params = SamplingParams(stop=("So",))
    await run_scaffold(
        strategy, PROBLEM, MockEngine(writer), RunSettings(routing=routing, params=params)
    )
    assert [r.params.stop for r in writer.requests] == [("So", S1.end), ("So",)]
    # OpenAI takes four stop strings at most: a request with four keeps its own.
    writer = Writer("<|im_start|>think 6*7 is 42. So", " \\boxed{42}")
    params = SamplingParams(stop=("So", "a", "b", "c"))
    await run_scaffold(
        strategy, PROBLEM, MockEngine(writer), RunSettings(routing=routing, params=params)
    )
    assert writer.requests[0].params.stop == ("So", "a", "b", "c")


# -- s1's own options: its stop token id, its prompt-side thinking start, its cap marker ---
# The reference: simplescaling/s1 at commit 77272c6, its eval harness's vLLM model.
IM_START = 151644
"""``<|im_start|>`` in the s1 models' Qwen2.5 tokenizer."""


class TokenWriter(Writer):
    """A Writer that also stops before ``<|im_start|>`` when the request asks to stop at
    its token id (as vLLM does: the stop token is not in the text)."""

    def __call__(self, request: GenerateRequest) -> list[Completion]:
        if IM_START in request.params.extra.get("stop_token_ids", ()):
            self.drafts[len(self.requests)] = self.drafts[len(self.requests)].partition(
                "<|im_start|>"
            )[0]
        return super().__call__(request)


def test_the_s1_options_parse_and_round_trip() -> None:
    spec = (
        'budget_forcing(mode="ignore", waits=1, max_thinking_tokens=32000, cue="Wait", '
        'stop_token_id=151644, open_thinking=true, cap_marker="\\nFinal Answer:")'
    )
    strategy = build_strategy(spec)
    assert strategy == BudgetForcing(
        mode="ignore",
        waits=1,
        max_thinking_tokens=32000,
        cue="Wait",
        stop_token_id=IM_START,
        open_thinking=True,
        cap_marker="\nFinal Answer:",
    )
    assert build_strategy(str(strategy)) == strategy
    with pytest.raises(SpecError) as info:
        build_strategy("budget_forcing(stop_token_id=-1)")
    assert info.value.param == "stop_token_id"


async def test_stop_token_id_stops_the_thinking_calls_at_the_token() -> None:
    """simplescaling/s1 eval/lm-evaluation-harness/lm_eval/models/vllm_causallms.py:246
    stops the thinking at ``<|im_start|>``; with ``thinking_n_ignore``
    set, lines 273-280 send it as ``stop_token_ids`` with ``min_tokens: 1`` (vLLM's
    min_tokens holds back stop_token_ids, not stop strings), and no stop string. The
    answer call (line 411) stops at neither. The thinking's start is in the prompt (line
    283, ``open_thinking``): with min_tokens 1 the model could not write it, as its first
    token is the stop token."""
    writer = TokenWriter(
        " 6*7 is 42 <|im_start|>answer dropped",
        " yes 42 <|im_start|>answer dropped too",
        "\n\\boxed{42}",
    )
    strategy = BudgetForcing(
        mode="ignore", waits=1, cue="Wait", stop_token_id=IM_START, open_thinking=True
    )
    result = await run(strategy, writer)
    thinking = {"stop_token_ids": [IM_START], "min_tokens": 1}
    assert [dict(r.params.extra) for r in writer.requests] == [thinking, thinking, {}]
    assert [r.params.stop for r in writer.requests] == [(), (), ()]
    assert writer.partials() == [
        "<|im_start|>think",
        "<|im_start|>think 6*7 is 42 Wait",
        "<|im_start|>think 6*7 is 42 Wait yes 42 <|im_start|>answer",
    ]
    assert result.solutions[0].answer == "42"


async def test_open_thinking_writes_the_thinking_start_into_the_prompt() -> None:
    """simplescaling/s1 eval/lm-evaluation-harness/lm_eval/models/vllm_causallms.py:283
    appends ``thinking_start`` (``<|im_start|>think``, line 239) to every prompt before
    the first thinking call; the README's example does the same (``prompt +=
    "<|im_start|>think"``). Here the first call continues an assistant
    message holding the start marker, and the message the model writes joins it."""
    writer = Writer(" 6*7 is 42", " yes", " \\boxed{42}")
    strategy = BudgetForcing(mode="ignore", waits=1, cue=" Wait", open_thinking=True)
    result = await run(strategy, writer)
    first = writer.requests[0]
    assert first.continue_final and first.prompt[-1] == Message(  # type: ignore[index]
        "assistant", "<|im_start|>think"
    )
    assert first.prompt[:-1] == (Message("user", "What is 6*7?"),)  # type: ignore[index]
    marker = S1.markers.end
    assert writer.partials() == [
        "<|im_start|>think",
        "<|im_start|>think 6*7 is 42 Wait",
        "<|im_start|>think 6*7 is 42 Wait yes" + marker,
    ]
    solution = result.solutions[0]
    assert solution.text == "<|im_start|>think 6*7 is 42 Wait yes" + marker + " \\boxed{42}"
    assert solution.answer == "42"


async def test_open_thinking_with_no_wait_keeps_the_start_in_the_answer() -> None:
    writer = Writer(" 6*7 is 42", " \\boxed{42}")
    result = await run(BudgetForcing(waits=0, open_thinking=True), writer)
    assert writer.partials() == ["<|im_start|>think", "<|im_start|>think 6*7 is 42" + S1.end]
    assert result.solutions[0].text.startswith("<|im_start|>think 6*7 is 42")


@pytest.mark.parametrize(
    ("thought", "closed"),
    [
        # Cut at the cap mid-line: a newline, then the end marker and "\nFinal Answer:".
        ("<|im_start|>think a b", "<|im_start|>think a b\n<|im_start|>answer\nFinal Answer:"),
        # Cut right after a newline: none added.
        ("<|im_start|>think a\n", "<|im_start|>think a\n<|im_start|>answer\nFinal Answer:"),
    ],
)
async def test_cap_marker_closes_a_capped_thinking_as_s1_does(thought: str, closed: str) -> None:
    """simplescaling/s1 eval/lm-evaluation-harness/lm_eval/models/vllm_causallms.py:254
    makes ``thinking_end_max = thinking_end + "\\nFinal Answer:"``; lines 401-409 write it
    after a thinking that ended by length (the cap), with a "\\n" before it unless the
    thinking's text ends with one. A thinking that ended on its own is closed with the
    marker alone (line 411)."""
    requests: list[GenerateRequest] = []

    def engine(request: GenerateRequest) -> list[Completion]:
        requests.append(request)
        if len(requests) == 1:  # the thinking, cut at its cap of 3 tokens
            return [Completion(thought, "length", None, 3)]
        return [Completion(" 42", "stop", None, 1)]

    strategy = BudgetForcing(
        mode="ignore", waits=1, max_thinking_tokens=3, cap_marker="\nFinal Answer:"
    )
    routing = Routing(thinking=S1)
    result = await run_scaffold(strategy, PROBLEM, MockEngine(engine), RunSettings(routing=routing))
    assert requests[0].params.max_tokens == 3
    assert len(requests) == 2  # capped: no cue, the answer at once
    assert requests[1].prompt[-1] == Message("assistant", closed)  # type: ignore[index]
    assert result.solutions[0].text == closed + " 42"


async def test_cap_marker_is_not_written_when_the_thinking_ends_on_its_own() -> None:
    writer = Writer("<|im_start|>think a", " 42")
    strategy = BudgetForcing(waits=0, max_thinking_tokens=30, cap_marker="\nFinal Answer:")
    await run(strategy, writer)
    assert writer.partials() == ["<|im_start|>think a" + S1.markers.end]


async def test_the_stop_token_fields_join_the_requests_own_extra() -> None:
    """A step's own engine fields (``StepSampling.extra``) go over the request's
    ``extra``, which stays on every call; the answer call carries the request's alone."""
    writer = TokenWriter(" 6*7 is 42 <|im_start|>answer", " \\boxed{42}")
    strategy = BudgetForcing(waits=0, stop_token_id=IM_START, open_thinking=True)
    params = SamplingParams(extra={"repetition_penalty": 1.1, "min_tokens": 0})
    routing = Routing(thinking=S1)
    await run_scaffold(
        strategy, PROBLEM, MockEngine(writer), RunSettings(routing=routing, params=params)
    )
    thinking, answer = (dict(r.params.extra) for r in writer.requests)
    assert thinking == {"repetition_penalty": 1.1, "min_tokens": 1, "stop_token_ids": [IM_START]}
    assert answer == {"repetition_penalty": 1.1, "min_tokens": 0}
