"""Request planning: a validated OpenAI request to the one scaffold run it asks for.

:func:`plan_run` resolves the model and scaffold, checks the fan-out against the limits,
turns messages or a prompt into a :class:`~scaffolds.problem.Problem`, caps the budget
and fixes the sampling params, and refuses OpenAI fields Ponder cannot honour.

>>> from scaffolds.engines.mock import MockEngine
>>> from server.runs.request import ChatCompletionRequest
>>> from server.pool.served_models import ServedModels
>>> from server.settings import Settings
>>> settings = Settings(model="m", engines=("http://unused/v1",))
>>> models = ServedModels.build(settings, engines={"m": MockEngine(lambda r: "4")})
>>> req = ChatCompletionRequest(model="m+gsr(n=2)", messages=[{"role": "user", "content": "hi"}])
>>> plan = plan_run(models, settings, "chat", req)
>>> plan.scaffold, plan.n, plan.budget.timeout_s
('gsr', 1, None)

A client key's limits are the request's too: its allow-list of models (a model outside
it is the 404 of one not served: :meth:`~server.pool.served_models.ServedModels.resolve`),
of scaffolds (403) and the largest fan-out it may ask (400, as the server's own cap):

>>> from server.keys import ClientKey, KeyLimits
>>> key = ClientKey("bob", "b", KeyLimits(scaffolds=("single",)))
>>> try:
...     plan_run(models, settings, "chat", req, key)
... except ForbiddenError as err:
...     err.code, err.param
('scaffold_not_allowed', 'model')
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any, Literal

from scaffolds.engines.messages import messages_from_openai
from scaffolds.engines.protocol import SamplingParams
from scaffolds.errors import FanOutError, InvalidRequestError
from scaffolds.evaluation.answers import AnswerFormat
from scaffolds.problem import Budget, Problem
from scaffolds.spec.build import check_runs, spec_string
from scaffolds.strategies.base import Strategy
from server.errors import ForbiddenError
from server.keys import ANONYMOUS, ClientKey
from server.model_settings import EFFORT_LEVELS, EffortLevelName, EffortPolicy
from server.pool.served_models import ServedModel, ServedModels
from server.runs.request import ChatCompletionRequest, CompletionRequest, EffortAsk, Endpoint
from server.settings import Settings

__all__ = [
    "FINAL_STEP_FIELDS",
    "TOOL_FIELDS",
    "UNSUPPORTED_FIELDS",
    "AnyRequest",
    "Effort",
    "RunPlan",
    "check_key",
    "passthrough_fields",
    "plan_run",
]

log = logging.getLogger("ponder.server")

AnyRequest = ChatCompletionRequest | CompletionRequest


EffortSource = Literal["policy", "scaffold", "passthrough"]


@dataclass(frozen=True)
class Effort:
    """What a request's reasoning effort did to its run: which spec ran and why.

    ``source`` is ``policy`` (the model's effort policy chose the spec and budget for
    ``level``), ``scaffold`` (the request named a scaffold, which wins over its effort) or
    ``passthrough`` (the model has no policy, or is configured ``effort: passthrough``:
    the field went to the engine as given).

    >>> Effort("reasoning_effort", "high", "majority(k=16)", "policy", 65536).to_json()["spec"]
    'majority(k=16)'
    """

    field: str
    level: str | None
    spec: str
    source: EffortSource
    budget: int | None = None
    """The run's budget of generated tokens from the policy (None: none from it)."""
    budget_tokens: int | None = None
    """The thinking budget asked (Messages' ``thinking.budget_tokens``)."""

    def to_json(self) -> dict[str, Any]:
        """The answer's ``ponder.effort`` (and the trace's ``effort`` note)."""
        out: dict[str, Any] = {
            "field": self.field,
            "level": self.level,
            "spec": self.spec,
            "source": self.source,
            "budget": self.budget,
        }
        if self.budget_tokens is not None:
            out["budget_tokens"] = self.budget_tokens
        return out


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
    answer_format: AnswerFormat = "boxed"
    """How the run reads answers: the request's ``answer_format``, else the model's."""
    key: ClientKey = ANONYMOUS
    """The client key the request came with (its token quota bounds the run)."""
    problems: tuple[Problem, ...] = ()
    """Every prompt's problem when a completions request holds several (``problem`` is
    the first): each is its own run, and choice ``i`` of prompt ``p`` is ``p * n + i``
    (the runs of a strategy that passes through share one engine request:
    ``Serving._run_all``)."""
    effort: Effort | None = None
    """What the request's reasoning effort did (None: it asked for none)."""

    @property
    def scaffold(self) -> str:
        """The metrics label: the top-level strategy name (bounded cardinality)."""
        return self.strategy.name


def plan_run(
    models: ServedModels,
    settings: Settings,
    endpoint: Endpoint,
    req: AnyRequest,
    key: ClientKey = ANONYMOUS,
) -> RunPlan:
    """Validate a request of ``key`` against the served models, the server's limits and
    the key's (:func:`check_key`); build its run."""
    unknown = req.unknown_fields()
    if unknown:
        log.info("passing on request fields Ponder does not read: %s", ", ".join(unknown))
    served, strategy = models.resolve(req.model, key.limits)
    if req.scaffold is not None:
        strategy = models.strategy(req.scaffold, "scaffold")
        models.check_named_models(strategy, "scaffold", key.limits)
    elif "(" in req.model:  # a spec in the model id (aliases were checked at start)
        models.check_named_models(strategy, "model", key.limits)
    ask = req.effort_ask()  # chat and text completions alike (Responses, Messages: as chat)
    effort = None
    if ask is not None:
        named = req.scaffold is not None or req.model != served.config.name
        effort, strategy = _effort(served, strategy, ask, named=named)
    every, final = passthrough_fields(strategy, req)
    if ask is not None:  # the effort's own fields: sent as asked, or kept from the engine
        every, final = _effort_fields(ask, effort, strategy, every, final)
    served.check_fields(every | final)  # what its engine cannot honour: a 400 before any run
    served.check_prompts(strategy, "scaffold" if req.scaffold is not None else "model")
    if isinstance(req, ChatCompletionRequest):
        messages = messages_from_openai([m.model_dump() for m in req.messages])
        problems: tuple[Problem, ...] = (Problem.from_messages(messages),)
        if problems[0].ends_with_tool_result and not (
            strategy.passes_through or _votes_tool_calls(strategy)
        ):
            raise InvalidRequestError(
                "messages: a conversation that ends with a tool result goes on through a "
                "scaffold that sends it as asked (single, or one that votes tool calls); "
                "this scaffold's steps would rewrite it",
                param="messages",
            )
    else:
        texts = [req.prompt] if isinstance(req.prompt, str) else req.prompt
        if not texts:
            raise InvalidRequestError("prompt must not be an empty list", param="prompt")
        if len(texts) > 1 and req.stream:
            raise InvalidRequestError(
                "a streamed request takes one prompt: send a list of prompts without stream",
                param="prompt",
            )
        problems = tuple(Problem.from_text(text) for text in texts)
    if req.reference is not None:
        problems = tuple(replace(p, reference=req.reference) for p in problems)
    check_runs(strategy, req.n * len(problems), models.limits)
    check_key(key, req, strategy, req.n * len(problems))
    asked = req.budget
    budget = (
        Budget(asked.max_tokens, asked.max_calls, asked.timeout_s) if asked else Budget()
    ).capped_by(settings.budget_cap())
    max_tokens = req.requested_max_tokens()
    if max_tokens is not None:  # each choice's generated tokens, every step's together
        budget = budget.capped_by(
            Budget(max_tokens=max_tokens * req.n, max_choice_tokens=max_tokens)
        )
    if effort is not None and effort.budget is not None:  # the policy's, for its level
        budget = budget.capped_by(Budget(max_tokens=effort.budget))
    # A call's own limit: the request's on pass-through; a multi-step scaffold's steps
    # that set none get the model's per-call default, within the run's bound.
    call_tokens = max_tokens if strategy.passes_through else None
    params = SamplingParams(
        n=1,
        max_tokens=call_tokens or served.config.default_max_tokens,
        temperature=served.config.default_temperature
        if req.temperature is None
        else req.temperature,
        top_p=served.config.default_top_p if req.top_p is None else req.top_p,
        stop=req.stop_list(),
        seed=req.seed,
        extra=every,
        final_extra=final,
    )
    return RunPlan(
        endpoint=endpoint,
        model=req.model,
        served=served,
        strategy=strategy,
        problem=problems[0],
        n=req.n,
        budget=budget,
        params=params,
        stream=req.stream,
        include_usage=req.include_usage(),
        return_trace=req.return_trace,
        stream_trace=req.stream_trace,
        answer_format=req.answer_format or served.config.default_answer_format(),
        key=key,
        problems=problems if len(problems) > 1 else (),
        effort=effort,
    )


def _effort(
    served: ServedModel, strategy: Strategy, ask: EffortAsk, *, named: bool
) -> tuple[Effort, Strategy]:
    """What ``ask`` makes of the run on ``served``, and the strategy that runs.

    With an effort policy, a level (or the cheapest level whose budget covers a thinking
    budget: :meth:`~server.model_settings.EffortPolicy.for_budget`) selects the policy's
    spec and budget, capped by the thinking budget; an unknown level is a 400 naming the
    field, in OpenAI's words. A scaffold the request names (``named``: its ``scaffold``
    field, or a spec or alias in its model) wins. Without a policy the field passes
    through."""
    policy = served.config.effort_policy
    if policy is None or served.config.effort_mode() == "passthrough":
        return Effort(ask.param, ask.level, spec_string(strategy), "passthrough"), strategy
    level = _level(policy, ask)
    if named:
        return Effort(ask.param, level, spec_string(strategy), "scaffold"), strategy
    budget = policy.level(level).budget
    if ask.budget_tokens is not None:
        budget = ask.budget_tokens if budget is None else min(budget, ask.budget_tokens)
    chosen = served.effort[level]
    effort = Effort(
        ask.param, level, spec_string(chosen), "policy", budget, budget_tokens=ask.budget_tokens
    )
    return effort, chosen


def _level(policy: EffortPolicy, ask: EffortAsk) -> EffortLevelName:
    """The level ``ask`` names, or the one its thinking budget selects; else a 400 as
    OpenAI words an unknown enum value."""
    if ask.level is None:
        return policy.for_budget(ask.budget_tokens or 1)
    for level in EFFORT_LEVELS:
        if ask.level == level:
            return level
    names = [f"'{level}'" for level in EFFORT_LEVELS]
    supported = ", ".join(names[:-1]) + f", and {names[-1]}"
    raise InvalidRequestError(
        f"Invalid value: '{ask.level}'. Supported values are: {supported}.",
        param=ask.param,
        code="invalid_value",
    )


def _effort_fields(
    ask: EffortAsk,
    effort: Effort | None,
    strategy: Strategy,
    every: dict[str, Any],
    final: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The pass-through fields with the effort's own: sent to the engine as asked when
    the effort passes through (on the calls a field of the request goes to), else left
    out (the policy or the named scaffold answered it)."""
    if effort is not None and effort.source == "passthrough":
        if strategy.passes_through:
            return every, final | dict(ask.forward)
        return every | dict(ask.forward), final
    keys = set(ask.forward) | {"reasoning_effort"}
    return (
        {k: v for k, v in every.items() if k not in keys},
        {k: v for k, v in final.items() if k not in keys},
    )


def check_key(key: ClientKey, req: AnyRequest, strategy: Strategy, runs: int) -> None:
    """Raise unless ``key`` may make ``runs`` runs of ``strategy`` (on a model it may
    use: a model outside its ``models`` never resolves, see
    :meth:`~server.pool.served_models.ServedModels.resolve`).

    A scaffold outside the key's ``scaffolds`` (the spec's every strategy, nested ones
    too) is a 403 with code ``scaffold_not_allowed``; more sequences than its
    ``max_fanout`` a 400 ``fan_out_exceeded``, as the server's own cap
    (:func:`check_runs`).
    """
    limits = key.limits
    if limits.scaffolds is not None:
        refused = sorted(_names(strategy) - set(limits.scaffolds))
        if refused:
            raise ForbiddenError(
                f"key {key.name!r} may not use the scaffold {', '.join(refused)} "
                f"(it may use {', '.join(limits.scaffolds) or 'none'})",
                param="scaffold" if req.scaffold is not None else "model",
                code="scaffold_not_allowed",
            )
    most = limits.max_fanout
    if most is not None:
        samples = (
            strategy.max_samples_many(runs)
            if strategy.batches_samples
            else runs * strategy.max_samples()
        )
        if samples > most:
            raise FanOutError(
                f"n={runs} runs of {strategy.name} may generate up to {samples} sequences, "
                f"over key {key.name!r}'s fan-out limit of {most}",
                param="n",
            )


def _names(strategy: Strategy) -> set[str]:
    """The names of ``strategy`` and of every strategy nested in it."""
    return {strategy.name}.union(*(_names(inner) for inner in strategy.inner()))


FINAL_STEP_FIELDS = frozenset(
    {
        "response_format",
        "logprobs",
        "top_logprobs",
        "parallel_tool_calls",
        "structured_outputs",
        "guided_json",
        "guided_regex",
        "guided_choice",
        "guided_grammar",
        "guided_decoding_backend",
        "guided_whitespace_pattern",
    }
)
"""Fields a multi-step scaffold sends only on the calls that write its final answer: the
answer's shape (structured output) and its logprobs. Every other field goes to every call."""

UNSUPPORTED_FIELDS = {
    "tools": "a scaffold's steps are not tool calls: tools work with the single scaffold",
    "functions": "a scaffold's steps are not tool calls: functions work with the single scaffold",
    "tool_choice": "a scaffold's steps are not tool calls: tool_choice works with the single "
    "scaffold",
    "function_call": "a scaffold's steps are not tool calls: function_call works with the "
    "single scaffold",
    "echo": "the prompt is not echoed: scaffolds rewrite it for their engine calls (echo works "
    "with the single scaffold)",
    "prompt_logprobs": "scaffolds rewrite the prompt for their engine calls (prompt_logprobs "
    "works with the single scaffold)",
    "suffix": "insertion (suffix) works with the single scaffold only",
    "best_of": 'server-side best_of is a scaffold here: use "scaffold": "best_of_n(n=...)"',
    "continue_final_message": "scaffolds write their own prompts (continue_final_message works "
    "with the single scaffold)",
    "add_generation_prompt": "scaffolds write their own prompts (add_generation_prompt works "
    "with the single scaffold)",
}
"""Fields a multi-step scaffold cannot honour: a request that sets one (to anything but
its off value) gets a 400 that says why, rather than an answer that silently lacks it.
A strategy that passes through (``single``) passes every one of them to the engine."""

_OFF: tuple[Any, ...] = (None, False, 0, "", [], {}, "none", "auto")


def passthrough_fields(
    strategy: Strategy, req: AnyRequest
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The request's pass-through fields as ``(every call, final-answer calls)``.

    A strategy that :attr:`~scaffolds.strategies.base.Strategy.passes_through` gets every
    field on its one call as given (the seed too, not one derived from it). A multi-step
    scaffold sends :data:`FINAL_STEP_FIELDS` to its final answer's calls, refuses
    :data:`UNSUPPORTED_FIELDS` (and ``logprobs`` where a strategy in the spec says
    :attr:`~scaffolds.strategies.base.Strategy.answer_logprobs_refused`) with a 400 naming
    the field, and sends the rest to every call.
    """
    fields = req.passthrough()
    if strategy.passes_through:
        return {}, fields | ({"seed": req.seed} if req.seed is not None else {})
    votes = _votes_tool_calls(strategy)
    for name, why in UNSUPPORTED_FIELDS.items():
        value = fields.get(name)
        if not _is_off(name, value):
            if votes and name in TOOL_FIELDS:
                if req.stream:
                    raise InvalidRequestError(
                        f"{name} with a voting scaffold is not streamed: the winning tool call "
                        "is known once every sample is in (send it without stream)",
                        param="stream",
                    )
                continue
            raise InvalidRequestError(f"{name} is not supported: {why}", param=name)
    final = {k: v for k, v in fields.items() if k in FINAL_STEP_FIELDS}
    refused = _logprobs_refused(strategy)
    for name in ("logprobs", "top_logprobs"):
        if refused is not None and not _is_off(name, final.get(name)):
            raise InvalidRequestError(f"{name} is not supported: {refused}", param=name)
    dropped = UNSUPPORTED_FIELDS.keys() - (TOOL_FIELDS if votes else frozenset())
    every = {k: v for k, v in fields.items() if k not in final and k not in dropped}
    return every, final


TOOL_FIELDS = frozenset({"tools", "tool_choice", "functions", "function_call"})
"""Fields a voting scaffold over a pass-through solver sends to its calls (its samples,
and best_of_n's judge, whose pick falls back to the vote when it calls a tool instead)."""


def _votes_tool_calls(strategy: Strategy) -> bool:
    """Whether ``strategy`` votes over tool calls: it says so, and each sample is one
    engine call of the prompt as asked (its solvers pass through)."""
    return strategy.votes_tool_calls and all(s.passes_through for s in strategy.inner())


def _is_off(name: str, value: Any) -> bool:
    if value is None:  # the usual case, first
        return True
    if isinstance(value, dict) and name == "response_format":
        return value.get("type") == "text"
    return any(value is off or (value == off and type(value) is type(off)) for off in _OFF)


def _logprobs_refused(strategy: Strategy) -> str | None:
    """Why the answer's logprobs are refused: the reason of ``strategy`` or of the first
    strategy nested in it (outermost first) that gives one; None when none does."""
    if strategy.answer_logprobs_refused is not None:
        return strategy.answer_logprobs_refused
    return next(filter(None, map(_logprobs_refused, strategy.inner())), None)
