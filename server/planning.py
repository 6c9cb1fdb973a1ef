"""Request planning: a validated OpenAI request to the one scaffold run it asks for.

:func:`plan_run` resolves the model and scaffold, checks the fan-out against the limits,
turns messages or a prompt into a :class:`~scaffolds.context.Problem`, caps the budget
and fixes the sampling params, and refuses OpenAI fields Ponder cannot honour.

>>> from scaffolds.engines.mock import MockEngine
>>> from server.protocol import ChatCompletionRequest
>>> from server.serving_models import ServedModels
>>> from server.settings import Settings
>>> settings = Settings(model="m", engines=("http://unused/v1",))
>>> models = ServedModels.build(settings, engines={"m": MockEngine(lambda r: "4")})
>>> req = ChatCompletionRequest(model="m+gsr(n=2)", messages=[{"role": "user", "content": "hi"}])
>>> plan = plan_run(models, settings, "chat", req)
>>> plan.scaffold, plan.n, plan.budget.timeout_s
('gsr', 1, 900.0)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from scaffolds.context import Budget, Problem
from scaffolds.engine import SamplingParams, messages_from_openai
from scaffolds.errors import InvalidRequestError
from scaffolds.spec import check_runs
from scaffolds.strategies.base import Strategy
from server.protocol import ChatCompletionRequest, CompletionRequest, Endpoint
from server.serving_models import ServedModel, ServedModels
from server.settings import Settings

__all__ = ["UNSUPPORTED_FIELDS", "AnyRequest", "RunPlan", "plan_run"]

log = logging.getLogger("ponder.server")

AnyRequest = ChatCompletionRequest | CompletionRequest


@dataclass(frozen=True)
class RunPlan:
    """Everything one run needs, decided once from the request."""

    endpoint: Endpoint
    model: str
    served: ServedModel
    strategy: Strategy
    problem: Problem
    n: int
    budget: Budget
    params: SamplingParams
    stream: bool
    include_usage: bool
    return_trace: bool
    stream_trace: bool = False

    @property
    def scaffold(self) -> str:
        """The metrics label: the top-level strategy name (bounded cardinality)."""
        return self.strategy.name


def plan_run(
    models: ServedModels, settings: Settings, endpoint: Endpoint, req: AnyRequest
) -> RunPlan:
    """Validate a request against the served models and limits; build its run."""
    unknown = req.unknown_fields()
    if unknown:
        log.info("ignoring unknown request fields: %s", ", ".join(unknown))
    _refuse_unsupported(req)
    served, strategy = models.resolve(req.model)
    if req.scaffold is not None:
        strategy = models.strategy(req.scaffold, "scaffold")
        models.check_named_models(strategy, "scaffold")
    elif "(" in req.model:  # a spec in the model id (aliases were checked at start)
        models.check_named_models(strategy, "model")
    check_runs(strategy, req.n, models.limits)
    strategy.check_prompt_set(served.config.prompts)
    if isinstance(req, ChatCompletionRequest):
        messages = messages_from_openai([m.model_dump() for m in req.messages])
        problem = Problem.from_messages(messages)
    else:
        text = req.prompt_text()
        if text is None:
            raise InvalidRequestError("only one prompt per request is supported", param="prompt")
        problem = Problem.from_text(text)
    asked = req.budget
    budget = (
        Budget(asked.max_tokens, asked.max_calls, asked.timeout_s) if asked else Budget()
    ).capped_by(settings.budget_cap())
    params = SamplingParams(
        n=1,
        max_tokens=req.requested_max_tokens() or served.config.default_max_tokens,
        temperature=served.config.default_temperature
        if req.temperature is None
        else req.temperature,
        top_p=served.config.default_top_p if req.top_p is None else req.top_p,
        stop=req.stop_list(),
        seed=req.seed,
        extra=req.sampling_extra(),
    )
    return RunPlan(
        endpoint=endpoint,
        model=req.model,
        served=served,
        strategy=strategy,
        problem=problem,
        n=req.n,
        budget=budget,
        params=params,
        stream=req.stream,
        include_usage=req.include_usage(),
        return_trace=req.return_trace,
        stream_trace=req.stream_trace,
    )


UNSUPPORTED_FIELDS = {
    "logprobs": "a scaffold's answer is built from several engine calls, so it has no "
    "single token distribution to report",
    "top_logprobs": "a scaffold's answer is built from several engine calls, so it has no "
    "single token distribution to report",
    "echo": "the prompt is not echoed: scaffolds rewrite it for their engine calls",
    "suffix": "insertion (suffix) is not supported",
    "best_of": 'server-side best_of is a scaffold here: use "scaffold": "best_of_n(n=...)"',
    "tools": "tool calling is not supported",
    "response_format": "structured output (response_format) is not supported",
}
"""OpenAI fields whose meaning Ponder cannot honour: a request that sets one (to anything
but its off value) gets a 400 that says why, rather than an answer that silently lacks it."""


def _refuse_unsupported(req: AnyRequest) -> None:
    extra = req.model_extra or {}
    for name, why in UNSUPPORTED_FIELDS.items():
        value = extra.get(name)
        off = value in (None, False, 0, "", [], {}) or (
            name == "response_format" and isinstance(value, dict) and value.get("type") == "text"
        )
        if not off:
            raise InvalidRequestError(f"{name} is not supported: {why}", param=name)
