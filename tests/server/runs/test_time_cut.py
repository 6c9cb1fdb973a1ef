"""A time limit the user sets cuts a run and says so; none is set by default.

Uvicorn on loopback, the fake engine server (testing/) and the official openai SDK. The
engine answers each call at once except the one this test makes slow (a long text at a
token's latency), so the run's ``budget.timeout_s`` lands inside that call: the answer is
what the run had before it, ``finish_reason`` "length", ``ponder.cut_reason`` "time".
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from server.settings import Settings
from testing.fake_engine import FakeEngineConfig, FakeEngineHandle, running_fake_engine
from testing.ponder import running_ponder
from tests.server.test_e2e import MODEL, messages, sdk, settings_for

LIMIT_S = 3.0
"""The run's time limit: the fast calls end well inside it, even on a slow machine; the
slow call (``SLOW_WORDS`` tokens at ``LATENCY_S`` each, 100 s) never does."""
LATENCY_S = 0.001
SLOW_WORDS = 100_000


class Script:
    """The engine's answers: call ``slow`` (counted from 1) is long, every other call
    answers ``\\boxed{answer}`` at once."""

    def __init__(self) -> None:
        self.slow, self.answer, self.calls = 0, "7", itertools.count(1)

    def __call__(self, body: dict[str, Any]) -> list[str]:
        n = int(body.get("n") or 1)
        if next(self.calls) == self.slow:
            return [" word" * SLOW_WORDS] * n
        return [f"so \\boxed{{{self.answer}}}"] * n

    def reset(self, slow: int, answer: str = "7") -> None:
        self.slow, self.answer, self.calls = slow, answer, itertools.count(1)


@pytest.fixture(scope="module")
def script() -> Script:
    return Script()


@pytest.fixture(scope="module")
def fake(script: Script) -> Iterator[FakeEngineHandle]:
    config = FakeEngineConfig(model=MODEL, respond=script, latency_per_token=LATENCY_S)
    with running_fake_engine(config) as handle:
        yield handle


@pytest.fixture(scope="module")
def ponder(fake: FakeEngineHandle) -> Iterator[str]:
    with running_ponder(settings_for(fake)) as url:
        yield url


def timed(scaffold: str) -> dict[str, Any]:
    return {"scaffold": scaffold, "budget": {"timeout_s": LIMIT_S}}


def assert_cut_by_time(ponder: str, scaffold: str, content: str) -> None:
    """A run of ``scaffold`` past its time limit answers ``content``, cut by time."""
    out = sdk(ponder).chat.completions.create(
        model=MODEL, messages=messages(), extra_body=timed(scaffold)
    )
    choice = out.choices[0]
    assert choice.message.content == content
    assert choice.finish_reason == "length"
    assert out.model_extra is not None and out.model_extra["ponder"]["cut_reason"] == "time"


RC = "rc(steps=3, reasoning_tokens=200000, summary_tokens=50)"
RSA = "rsa(n=2, k=2, rounds=2)"


def test_rc_cut_by_time_returns_its_earlier_chunk(
    fake: FakeEngineHandle, ponder: str, script: Script
) -> None:
    """Calls: reasoning 1, summary 1, reasoning 2 (slow): the answer is reasoning 1's."""
    script.reset(slow=3, answer="5")
    assert_cut_by_time(ponder, RC, "so \\boxed{5}")


def test_rsa_cut_mid_round_votes_over_what_it_has(
    fake: FakeEngineHandle, ponder: str, script: Script
) -> None:
    """Calls: the population (one call, n=2), then round 1's two aggregations, one slow:
    the round never finishes, and the run answers from the population it has."""
    script.reset(slow=3)
    assert_cut_by_time(ponder, RSA, "so \\boxed{7}")


def test_a_streamed_run_cut_by_time_says_so(
    fake: FakeEngineHandle, ponder: str, script: Script
) -> None:
    script.reset(slow=3, answer="5")
    stream = sdk(ponder).chat.completions.create(
        model=MODEL, messages=messages(), extra_body=timed(RC), stream=True
    )
    content, finish, cut = "", None, None
    for chunk in stream:
        for choice in chunk.choices:
            content += choice.delta.content or ""
            finish = choice.finish_reason or finish
        cut = (chunk.model_extra or {}).get("ponder", {}).get("cut_reason") or cut
    assert content.endswith("so \\boxed{5}")
    assert (finish, cut) == ("length", "time")


def test_a_single_call_cut_by_time_before_any_answer_is_a_504_deadline_exceeded(
    fake: FakeEngineHandle, ponder: str, script: Script
) -> None:
    """DeepConf's one big call (as any run with no answer yet): nothing to answer with, so
    the time cut is the error ``deadline_exceeded`` (what ``ponder eval`` counts as a
    time cut)."""
    script.reset(slow=1)
    with pytest.raises(openai.APIStatusError) as info:
        sdk(ponder).chat.completions.create(
            model=MODEL, messages=messages(), extra_body=timed("deepconf(n=4)")
        )
    assert info.value.status_code == 504
    body = info.value.body
    assert isinstance(body, dict) and body["code"] == "deadline_exceeded"


def test_no_time_limit_by_default() -> None:
    """A long run is normal on a GPU engine: neither the run nor one engine call has a
    time limit unless the user sets one (they were 900 s and 600 s)."""
    settings = Settings(model=MODEL, engines=("http://engine/v1",))
    assert settings.max_budget_timeout_s is None
    assert settings.engine_read_timeout_s is None
    assert settings.budget_cap().timeout_s is None
