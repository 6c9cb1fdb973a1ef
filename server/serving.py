"""The serving layer: one HTTP request becomes one scaffold run, here and only here.

:meth:`Serving.plan` turns a validated request into a :class:`RunPlan` (model, scaffold,
problem, sampling params, budget); :meth:`Serving.handle` admits it (429 when full), runs
it through :func:`~scaffolds.run.run_scaffold` while watching for the client to go away,
and shapes the answer as an OpenAI response or SSE stream. Routers only call ``handle``.

>>> from scaffolds.engines.mock import MockEngine
>>> from server.settings import Settings
>>> settings = Settings(model="m", engines=("http://unused/v1",), aliases={"g2": "gsr(n=2)"})
>>> serving = Serving.build(settings, engines={"m": MockEngine(lambda r: "\\\\boxed{4}")})
>>> [card["id"] for card in serving.model_cards()]
['m', 'm+g2']
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from scaffolds.answer_pool import AnswerChecker
from scaffolds.context import Budget, Problem
from scaffolds.engine import Engine, SamplingParams, messages_from_openai
from scaffolds.engines.local import LocalEngine
from scaffolds.engines.openai_http import OpenAIEngine
from scaffolds.engines.reward import HTTPRewardModel
from scaffolds.errors import FanOutError, InvalidRequestError, NotFoundError, SpecError
from scaffolds.run import RunResult, run_scaffold
from scaffolds.spec import (
    Registry,
    SpecLimits,
    build_strategy,
    check_runs,
    default_registry,
    spec_string,
)
from scaffolds.strategies.base import Solution, Strategy
from scaffolds.trace import StepFinished, TraceRecorder
from server.engines import (
    MeteredEngine,
    ReplicaEngine,
    engine_aclose,
    engine_health,
    engine_start,
    replica_status,
)
from server.errors import ClientDisconnectedError, api_error
from server.limits import RunLimiter
from server.metrics import Metrics
from server.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    Endpoint,
    chunk_object,
    completion_object,
    delta_choice,
    model_card,
)
from server.settings import LOCAL_ENGINE_PREFIX, ModelConfig, Settings
from server.streaming import ChoiceRouter, SSEResponse, sse_event, stream_event_json

log = logging.getLogger("ponder.server")
T = TypeVar("T")

AnyRequest = ChatCompletionRequest | CompletionRequest


@dataclass(frozen=True)
class ServedModel:
    """A base model, its (metered, replicated) engine, default scaffold and aliases."""

    config: ModelConfig
    engine: Engine
    default: Strategy
    aliases: Mapping[str, Strategy]
    reward_model: HTTPRewardModel | None = None


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


def _spec_error(exc: SpecError, where: str) -> SpecError:
    """Re-root a spec error's dotted ``param`` under the request field it came from."""
    param = where if exc.param in (None, "scaffold") else f"{where}.{exc.param}"
    cls = FanOutError if isinstance(exc, FanOutError) else SpecError
    return cls(exc.message, param=param)


class Serving:
    """Holds the served models and turns requests into scaffold runs."""

    def __init__(
        self,
        settings: Settings,
        models: Mapping[str, ServedModel],
        *,
        registry: Registry,
        metrics: Metrics,
        limiter: RunLimiter,
    ):
        self.settings = settings
        self.models = dict(models)
        self.registry = registry
        self.metrics = metrics
        self.limiter = limiter
        self.spec_limits: SpecLimits = settings.spec_limits()
        self.budget_cap = settings.budget_cap()
        # Votes compare answers with math-verify, which can hang on pathological LaTeX:
        # a process pool with a time limit keeps that off the event loop.
        self.voter = AnswerChecker(max_workers=1)

    # -- construction ------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        settings: Settings,
        *,
        metrics: Metrics | None = None,
        engines: Mapping[str, Engine] | None = None,
    ) -> Serving:
        """Build engines (or use ``engines`` by model name) and validate every scaffold.

        A bad default scaffold or alias raises :class:`SpecError` naming it.
        """
        metrics = metrics or Metrics()
        registry = default_registry()
        limits = settings.spec_limits()
        models: dict[str, ServedModel] = {}
        for config in settings.served_models():
            if engines is not None and config.name in engines:
                inner = engines[config.name]
            else:
                inner = _http_engine(config, settings)
            try:
                default = build_strategy(config.default_scaffold, registry, limits)
            except SpecError as exc:
                raise _spec_error(exc, f"models.{config.name}.default_scaffold") from None
            aliases: dict[str, Strategy] = {}
            for alias, spec in config.alias_specs().items():
                try:
                    aliases[alias] = build_strategy(spec, registry, limits)
                except SpecError as exc:
                    raise _spec_error(exc, f"aliases.{alias}") from None
            for strategy in (default, *aliases.values()):
                strategy.check_prompt_set(config.prompts)
            engine = MeteredEngine(inner, metrics, config.name)
            reward = (
                HTTPRewardModel(config.reward_url, config.reward_model or config.name)
                if config.reward_url
                else None
            )
            models[config.name] = ServedModel(config, engine, default, aliases, reward)
        limiter = RunLimiter(settings.max_concurrent_runs, settings.queue_size, metrics)
        return cls(settings, models, registry=registry, metrics=metrics, limiter=limiter)

    async def start(self) -> None:
        """Start the engines' background work (replica health polls)."""
        for served in self.models.values():
            await engine_start(served.engine)

    async def aclose(self) -> None:
        for served in self.models.values():
            await engine_aclose(served.engine)
            if served.reward_model is not None:
                await served.reward_model.aclose()
        self.voter.close()

    # -- models ------------------------------------------------------------------------
    def model_cards(self) -> list[dict[str, Any]]:
        """``/v1/models`` entries: each base model, then its aliases."""
        cards = []
        for name, served in self.models.items():
            default = spec_string(served.default)
            cards.append(model_card(name, ponder={"base_model": name, "scaffold": default}))
            for alias, strategy in served.aliases.items():
                cards.append(
                    model_card(
                        alias, ponder={"base_model": name, "scaffold": spec_string(strategy)}
                    )
                )
        return cards

    def resolve_model(self, model: str) -> tuple[ServedModel, Strategy]:
        """A model id (base, alias, or ``base+<spec>``) to its model and scaffold."""
        if model in self.models:
            served = self.models[model]
            return served, served.default
        base, plus, suffix = model.partition("+")
        served_or_none = self.models.get(base) if plus else None
        if served_or_none is not None:
            if model in served_or_none.aliases:
                return served_or_none, served_or_none.aliases[model]
            try:
                return served_or_none, build_strategy(suffix, self.registry, self.spec_limits)
            except SpecError as exc:
                if "(" in suffix:
                    raise _spec_error(exc, "model") from None
        known = ", ".join(card["id"] for card in self.model_cards())
        raise NotFoundError(f"the model {model!r} does not exist (known: {known})", param="model")

    # -- planning ----------------------------------------------------------------------
    def plan(self, endpoint: Endpoint, req: AnyRequest) -> RunPlan:
        """Validate a request against the served models and limits; build its run."""
        unknown = req.unknown_fields()
        if unknown:
            log.info("ignoring unknown request fields: %s", ", ".join(unknown))
        _refuse_unsupported(req)
        served, strategy = self.resolve_model(req.model)
        if req.scaffold is not None:
            try:
                strategy = build_strategy(req.scaffold, self.registry, self.spec_limits)
            except SpecError as exc:
                raise _spec_error(exc, "scaffold") from None
        check_runs(strategy, req.n, self.spec_limits)
        strategy.check_prompt_set(served.config.prompts)
        if isinstance(req, ChatCompletionRequest):
            messages = messages_from_openai([m.model_dump() for m in req.messages])
            problem = Problem.from_messages(messages)
        else:
            text = req.prompt_text()
            if text is None:
                raise InvalidRequestError(
                    "only one prompt per request is supported", param="prompt"
                )
            problem = Problem.from_text(text)
        asked = req.budget
        budget = (
            Budget(asked.max_tokens, asked.max_calls, asked.timeout_s) if asked else Budget()
        ).capped_by(self.budget_cap)
        params = SamplingParams(
            n=1,
            max_tokens=req.requested_max_tokens() or self.settings.default_max_tokens,
            temperature=req.temperature,
            top_p=req.top_p,
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

    # -- handling ----------------------------------------------------------------------
    async def handle(self, endpoint: Endpoint, req: AnyRequest, request: Request) -> Response:
        """Plan, admit, run and answer one completion request."""
        started = time.perf_counter()
        base = req.model.partition("+")[0]  # labels stay bounded whatever the client sends
        labels = {"endpoint": endpoint, "model": base if base in self.models else "unknown"}
        labels["scaffold"] = "-"
        try:
            plan = self.plan(endpoint, req)
            labels.update(model=plan.served.config.name, scaffold=plan.scaffold)
            slot = self.limiter.admit()
        except Exception as exc:
            self._observe(labels, api_error(exc).status, started)
            raise
        try:
            await self._until_disconnect(request, slot.acquire())
        except BaseException as exc:
            slot.release()
            self._observe(labels, _status_of(exc), started)
            raise
        if plan.stream:
            observed = False

            def observe(status: int) -> None:
                nonlocal observed
                if not observed:
                    observed = True
                    if status == 499:
                        self.metrics.disconnects.inc()
                    self._observe(labels, status, started)

            def close() -> None:
                slot.release()
                observe(499)  # counts a client that left before its stream began

            return SSEResponse(self._sse(plan, observe), on_close=close)
        try:
            recorder = TraceRecorder()
            result = await self._until_disconnect(request, self._run(plan, recorder))
            response = self._response(plan, result, recorder)
        except BaseException as exc:
            self._observe(labels, _status_of(exc), started)
            raise
        finally:
            slot.release()
        self._observe(labels, 200, started)
        return JSONResponse(response)

    def _observe(self, labels: Mapping[str, str], status: int, started: float) -> None:
        self.metrics.requests.labels(**labels, status=str(status)).inc()
        self.metrics.request_latency.labels(**labels).observe(time.perf_counter() - started)

    async def _until_disconnect(self, request: Request, work: Awaitable[T]) -> T:
        """Await ``work`` in a task; cancel it if the client goes away first."""
        task: asyncio.Future[T] = asyncio.ensure_future(work)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=self.settings.disconnect_poll_s)
                if done:
                    return task.result()
                if await request.is_disconnected():
                    self.metrics.disconnects.inc()
                    log.info("client disconnected; cancelling the run")
                    raise ClientDisconnectedError("the client closed the connection")
        finally:
            if not task.done():
                task.cancel()
                await asyncio.wait({task})

    async def _run(self, plan: RunPlan, recorder: TraceRecorder) -> RunResult:
        try:
            result = await run_scaffold(
                plan.strategy,
                plan.problem,
                plan.served.engine,
                n=plan.n,
                budget=plan.budget,
                params=plan.params,
                prompts=plan.served.config.prompts,
                chat=plan.endpoint == "chat",
                recorder=recorder,
                voter=self.voter,
                reward_model=plan.served.reward_model,
            )
        finally:
            recorder.close()
        model, scaffold = plan.served.config.name, plan.scaffold
        if result.cut_reason:
            self.metrics.budget_cutoffs.labels(
                model=model, scaffold=scaffold, reason=result.cut_reason
            ).inc()
        tokens = self.metrics.run_tokens
        tokens.labels(model=model, scaffold=scaffold, kind="prompt").inc(result.usage.prompt_tokens)
        tokens.labels(model=model, scaffold=scaffold, kind="completion").inc(
            result.usage.completion_tokens
        )
        self.metrics.run_engine_calls.labels(model=model, scaffold=scaffold).inc(result.usage.calls)
        return result

    def _extra(self, plan: RunPlan, result: RunResult, recorder: TraceRecorder) -> dict[str, Any]:
        extra: dict[str, Any] = {
            "ponder": {"scaffold": spec_string(plan.strategy), "cut_reason": result.cut_reason}
        }
        if plan.return_trace:
            extra["trace"] = recorder.to_json()
        return extra

    def _response(
        self, plan: RunPlan, result: RunResult, recorder: TraceRecorder
    ) -> dict[str, Any]:
        router = ChoiceRouter(plan.n)
        for event in result.events:
            router.feed(event)
        reasons = finish_reasons(result)
        choices = [
            {"text": s.text, "reasoning": router.reasoning(i) or None, "finish_reason": reasons[i]}
            for i, s in enumerate(result.solutions)
        ]
        return completion_object(
            plan.endpoint,
            response_id=_response_id(plan.endpoint),
            created=int(time.time()),
            model=plan.model,
            choices=choices,
            usage=result.usage,
            extra=self._extra(plan, result, recorder),
        )

    async def _sse(self, plan: RunPlan, observe: Callable[[int], None]) -> AsyncIterator[bytes]:
        """The SSE body: role chunks, reasoning/content deltas, finish, usage, [DONE].

        ``observe`` records the request's final status (499 when the client left).
        """
        recorder = TraceRecorder(live=True)
        events = recorder.subscribe()
        task = asyncio.ensure_future(self._run(plan, recorder))
        router = ChoiceRouter(plan.n)
        response_id, created = _response_id(plan.endpoint), int(time.time())

        def chunk(choices: list[dict[str, Any]], **kw: Any) -> bytes:
            return sse_event(
                chunk_object(
                    plan.endpoint,
                    response_id=response_id,
                    created=created,
                    model=plan.model,
                    choices=choices,
                    **kw,
                )
            )

        status = 499
        try:
            if plan.endpoint == "chat":
                for i in range(plan.n):
                    yield chunk([delta_choice("chat", i, role=True, content="")])
            async for event in events:
                if plan.stream_trace:
                    yield chunk([], extra={"ponder": {"event": stream_event_json(event)}})
                for piece in router.feed(event):
                    text = piece.text
                    if piece.kind == "content":
                        choice = delta_choice(plan.endpoint, piece.choice, content=text)
                    else:
                        choice = delta_choice(plan.endpoint, piece.choice, reasoning=text)
                    yield chunk([choice])
            result = await task
            for i, reason in enumerate(finish_reasons(result)):
                yield chunk([delta_choice(plan.endpoint, i, finish_reason=reason)])
            extra = self._extra(plan, result, recorder)
            if plan.include_usage:
                yield chunk([], usage=result.usage, extra=extra)
            elif plan.return_trace:
                yield chunk([], extra=extra)
            status = 200
        except Exception as exc:
            error = api_error(exc)
            status = error.status
            if error.status >= 500:
                log.warning("stream failed: %s (%s)", error.message, type(exc).__name__)
            yield sse_event(error.body())
        finally:
            if not task.done():
                task.cancel()
                await asyncio.wait({task})
            observe(status)
        yield sse_event("[DONE]")

    # -- readiness ---------------------------------------------------------------------
    async def readiness(self) -> tuple[bool, dict[str, Any]]:
        """Whether every model has a reachable engine, and the per-model detail."""
        names = list(self.models)
        checks = await asyncio.gather(*(engine_health(self.models[n].engine) for n in names))
        detail = {
            name: "ok" if ok else "unreachable" for name, ok in zip(names, checks, strict=True)
        }
        ready = all(checks)
        out: dict[str, Any] = {"status": "ready" if ready else "unavailable", "models": detail}
        replicas = {n: replica_status(self.models[n].engine) for n in names}
        if any(r is not None for r in replicas.values()):
            out["replicas"] = {n: r for n, r in replicas.items() if r is not None}
        return ready, out


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


def finish_reasons(result: RunResult) -> list[str]:
    """Per choice: ``length`` when the solution was cut short or its completion truncated."""
    steps = {e.step_id: e for e in result.events if isinstance(e, StepFinished)}
    return [
        _finish_reason(solution, choice, steps) for choice, solution in enumerate(result.solutions)
    ]


def _finish_reason(solution: Solution, choice: int, steps: Mapping[str, StepFinished]) -> str:
    if solution.cut_short:
        return "length"
    step = steps.get(solution.step_id or "")
    if step is None or not step.finish_reasons:
        return "stop"
    index = next((i for i, t in enumerate(step.texts) if t == solution.text), None)
    if index is None:
        index = choice if choice < len(step.finish_reasons) else 0
    return "length" if step.finish_reasons[index] == "length" else "stop"


def _status_of(exc: BaseException) -> int:
    if isinstance(exc, asyncio.CancelledError):
        return 499
    return api_error(exc).status


def _response_id(endpoint: Endpoint) -> str:
    prefix = "chatcmpl" if endpoint == "chat" else "cmpl"
    return f"{prefix}-{uuid.uuid4().hex}"


def _http_engine(config: ModelConfig, settings: Settings) -> Engine:
    key = config.engine_api_key.get_secret_value() if config.engine_api_key else None
    replicas: list[Engine] = [
        LocalEngine(url.removeprefix(LOCAL_ENGINE_PREFIX))
        if url.startswith(LOCAL_ENGINE_PREFIX)
        else OpenAIEngine(
            url,
            config.served_engine_model,
            api_key=key,
            connect_timeout=settings.engine_connect_timeout_s,
            read_timeout=settings.engine_read_timeout_s,
            max_retries=settings.engine_max_retries,
            dialect=config.dialect,
            pool_shards=settings.engine_pool_shards,
        )
        for url in config.engines
    ]
    if len(replicas) == 1:
        return replicas[0]
    return ReplicaEngine(
        replicas,
        failure_threshold=settings.engine_breaker_threshold,
        cooldown_s=settings.engine_breaker_cooldown_s,
        health_interval_s=settings.engine_health_interval_s,
        load_factor=settings.engine_load_factor,
    )


__all__ = ["RunPlan", "ServedModel", "Serving", "finish_reasons"]
