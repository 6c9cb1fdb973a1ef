"""A request's reasoning effort to the run it selects (planning, unit level)."""

from __future__ import annotations

from typing import Any

import pytest

from scaffolds.engines.mock import MockEngine
from scaffolds.errors import InvalidRequestError
from server.api.messages.protocol import MessagesRequest, chat_from_messages
from server.api.responses.protocol import ResponsesRequest, chat_from_responses
from server.pool.served_models import ServedModels
from server.runs.planning import RunPlan, plan_run
from server.runs.request import ChatCompletionRequest
from server.settings import Settings

POLICY = {
    "minimal": {"spec": "single", "budget": 1000},
    "low": {"spec": "majority(k=4)", "budget": 4000},
    "medium": {"spec": "majority(k=8)", "budget": 8000},
    "high": {"spec": "majority(k=16)", "budget": 16000},
    "auto": {"spec": "adaptive(max_k=8, wave=4)", "budget": 16000},
}
MESSAGES = [{"role": "user", "content": "2+2?"}]


def plan(req: ChatCompletionRequest, **model: Any) -> RunPlan:
    settings = Settings(
        model="m", engines=("http://unused/v1",), aliases={"g2": "gsr(n=2)"}, **model
    )
    models = ServedModels.build(settings, engines={"m": MockEngine(lambda r: "4")})
    return plan_run(models, settings, "chat", req)


def chat(**fields: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"model": "m", "messages": MESSAGES} | fields)


@pytest.mark.parametrize(
    ("level", "spec", "budget"),
    [
        ("minimal", "single", 1000),
        ("low", "majority(k=4)", 4000),
        ("medium", "majority", 8000),  # the spec as ponder.scaffold prints it: k=8 by default
        ("high", "majority(k=16)", 16000),
        ("auto", "adaptive(max_k=8)", 16000),
    ],
)
def test_each_level_runs_its_policy_spec_within_its_budget(
    level: str, spec: str, budget: int
) -> None:
    p = plan(chat(reasoning_effort=level), effort_policy=POLICY)
    assert p.effort is not None and p.effort.to_json() == {
        "field": "reasoning_effort",
        "level": level,
        "spec": spec,
        "source": "policy",
        "budget": budget,
    }
    assert p.budget.max_tokens == budget
    assert "reasoning_effort" not in p.params.extra | p.params.final_extra  # not the engine's


def test_the_tighter_of_the_policy_and_the_request_budget_holds() -> None:
    p = plan(chat(reasoning_effort="high", max_tokens=50), effort_policy=POLICY)
    assert p.budget.max_tokens == 50
    p = plan(chat(reasoning_effort="high", budget={"max_tokens": 9000}), effort_policy=POLICY)
    assert p.budget.max_tokens == 9000


def test_a_scaffold_named_in_the_request_wins_over_its_effort() -> None:
    for req in (
        chat(reasoning_effort="high", scaffold="gsr(n=2)"),
        chat(reasoning_effort="high", model="m+g2"),
        chat(reasoning_effort="high", model="m+gsr(n=2)"),
    ):
        p = plan(req, effort_policy=POLICY)
        assert p.strategy.name == "gsr" and p.budget.max_tokens is None
        assert p.effort is not None and p.effort.source == "scaffold"
        assert p.effort.spec == "gsr(n=2)" and p.effort.level == "high"
        assert "reasoning_effort" not in p.params.extra


def test_an_unknown_level_is_a_400_in_openais_words() -> None:
    with pytest.raises(InvalidRequestError) as err:
        plan(chat(reasoning_effort="extreme"), effort_policy=POLICY)
    assert err.value.param == "reasoning_effort" and err.value.code == "invalid_value"
    assert err.value.message == (
        "Invalid value: 'extreme'. Supported values are: 'minimal', 'low', 'medium', "
        "'high', and 'auto'."
    )


def test_without_a_policy_or_configured_passthrough_the_field_goes_to_the_engine() -> None:
    for model in ({}, {"effort": "passthrough"}):
        p = plan(chat(reasoning_effort="extreme"), **model)  # the engine judges the value
        assert p.strategy.name == "single" and p.params.final_extra == {
            "reasoning_effort": "extreme"
        }
        assert p.effort is not None and p.effort.source == "passthrough"
        p = plan(chat(reasoning_effort="low", scaffold="majority(k=2)"), **model)
        assert p.params.extra == {"reasoning_effort": "low"}  # every call, as before
    p = plan(chat())
    assert p.effort is None


def test_responses_reasoning_effort_selects_the_same_way() -> None:
    req = ResponsesRequest(model="m", input="2+2?", reasoning={"effort": "medium"})
    p = plan(chat_from_responses(req, history=[]), effort_policy=POLICY)
    assert p.effort is not None and (p.effort.field, p.effort.spec) == (
        "reasoning.effort",
        "majority",
    )
    with pytest.raises(InvalidRequestError) as err:
        req = ResponsesRequest(model="m", input="2+2?", reasoning={"effort": "max"})
        plan(chat_from_responses(req, history=[]), effort_policy=POLICY)
    assert err.value.param == "reasoning.effort" and err.value.code == "invalid_value"
    passed = plan(chat_from_responses(req, history=[]))  # no policy: the chat field
    assert passed.params.final_extra == {"reasoning_effort": "max"}
    summary = ResponsesRequest(model="m", input="2+2?", reasoning={"summary": "auto"})
    assert plan(chat_from_responses(summary, history=[]), effort_policy=POLICY).effort is None


def messages(thinking: dict[str, Any] | None) -> ChatCompletionRequest:
    req = MessagesRequest.model_validate(
        {"model": "m", "max_tokens": 100_000, "messages": MESSAGES, "thinking": thinking}
    )
    return chat_from_messages(req)


@pytest.mark.parametrize(
    ("tokens", "spec"),
    [
        (1024, "majority(k=4)"),
        (1000, "single"),
        (8000, "majority"),
        (50_000, "majority(k=16)"),
    ],
)
def test_a_thinking_budget_selects_the_cheapest_covering_level_capped_at_it(
    tokens: int, spec: str
) -> None:
    p = plan(messages({"type": "enabled", "budget_tokens": tokens}), effort_policy=POLICY)
    assert p.effort is not None and p.effort.spec == spec
    assert p.effort.field == "thinking.budget_tokens" and p.effort.budget_tokens == tokens
    assert p.budget.max_tokens == min(tokens, 16000)  # the thinking budget, within the level's


def test_thinking_disabled_asks_no_effort_and_a_bad_budget_is_a_400() -> None:
    p = plan(messages({"type": "disabled"}), effort_policy=POLICY)
    assert p.effort is None and p.strategy.name == "single"
    with pytest.raises(InvalidRequestError) as err:
        messages({"type": "enabled", "budget_tokens": "lots"})
    assert err.value.param == "thinking.budget_tokens"
    p = plan(messages({"type": "enabled", "budget_tokens": 2048}))  # no policy: as before
    assert p.params.final_extra == {} and p.effort is not None
    assert p.effort.source == "passthrough"
