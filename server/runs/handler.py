"""The serving layer: one HTTP request becomes one scaffold run, here and only here.

:class:`Serving` ties the parts together: :mod:`server.pool.served_models` (the served
models and their engines), :mod:`server.runs.planning` (request to :class:`RunPlan`),
admission (:class:`~server.runs.admission.RunLimiter`, 429 when full), the run itself through
:func:`~scaffolds.core.run.run_scaffold` while watching for the client to go away
(:mod:`server.runs.disconnect`), and :mod:`server.runs.completion` (the
completion object or its SSE chunks). Routers only call :meth:`Serving.handle`.

>>> from scaffolds.engines.mock import MockEngine
>>> from server.settings import Settings
>>> settings = Settings(model="m", engines=("http://unused/v1",), aliases={"g2": "gsr(n=2)"})
>>> serving = Serving.build(settings, engines={"m": MockEngine(lambda r: "\\\\boxed{4}")})
>>> [card["id"] for card in serving.model_cards()]
['m', 'm+g2']
>>> from server.keys import KeyLimits
>>> only = ClientKey("ci", "ci", KeyLimits(models=("m+g2",)))
>>> [card["id"] for card in serving.model_cards(only)]
['m+g2']
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar

from fastapi.responses import Response

from scaffolds.core.run import RunResult, run_scaffold
from scaffolds.core.run_settings import RunSettings
from scaffolds.core.trace import StepNote, TraceRecorder
from scaffolds.engines.coalesce import Coalescer
from scaffolds.engines.protocol import Engine, Usage, batch_engine
from scaffolds.evaluation.answer_pool import AnswerChecker
from scaffolds.fanout import gather
from scaffolds.problem import Problem
from scaffolds.spec.build import SpecLimits
from scaffolds.spec.registry import Registry
from scaffolds.strategies.base import Strategy
from server.errors import ClientDisconnectedError, KeyLimitError, api_error
from server.keys import ANONYMOUS, ClientKey
from server.pool.sequences import run_key
from server.pool.served_models import ServedModel, ServedModels
from server.runs.admission import RunLimiter
from server.runs.completion import (
    FastJSONResponse,
    completion_body,
)
from server.runs.disconnect import Receive, until_disconnect
from server.runs.planning import AnyRequest, RunPlan, plan_run
from server.runs.request import Endpoint
from server.runs.sse_bodies import chat_sse, start_live, wire_sse
from server.runs.streaming import SSEResponse
from server.runs.wire import DirectCall, LiveRun, WireFormat
from server.settings import Settings
from server.telemetry.metrics import Metrics

log = logging.getLogger("ponder.server")
T = TypeVar("T")

__all__ = ["Serving"]


class Serving:
    """Holds the served models and turns requests into scaffold runs."""

    def __init__(
        self, settings: Settings, served: ServedModels, *, metrics: Metrics, limiter: RunLimiter
    ):
        self.settings = settings
        self.served = served
        self.metrics = metrics
        self.limiter = limiter
        # Votes compare answers with math-verify, which can hang on pathological LaTeX:
        # a process pool with a time limit keeps that off the event loop.
        self.voter = AnswerChecker(max_workers=1)
        self._warming: asyncio.Task[None] | None = None

    @classmethod
    def build(
        cls,
        settings: Settings,
        *,
        metrics: Metrics | None = None,
        engines: Mapping[str, Engine] | None = None,
    ) -> Serving:
        """Serving over :meth:`ServedModels.build` (which raises on a bad scaffold)."""
        metrics = metrics or Metrics()
        served = ServedModels.build(settings, metrics=metrics, engines=engines)
        limiter = RunLimiter(
            settings.max_concurrent_runs,
            settings.queue_size,
            metrics,
            reserved=settings.reserved_runs,
        )
        return cls(settings, served, metrics=metrics, limiter=limiter)

    @property
    def models(self) -> Mapping[str, ServedModel]:
        return self.served.models

    @property
    def registry(self) -> Registry:
        return self.served.registry

    @property
    def spec_limits(self) -> SpecLimits:
        return self.served.limits

    async def start(self) -> None:
        """Start what a request would otherwise start cold: the answer pool (its workers
        spawn and import math-verify in the background, and :meth:`readiness` says not
        ready until they are warm; after a recycle its replacement warms at once), and
        the engines' background work (replica health polls, the sequence bound they
        report)."""
        self.voter.start()  # its workers spawn and warm in the background: /ready waits
        self._warming = asyncio.create_task(self._warm_answer_pool())
        await self.served.start()

    async def _warm_answer_pool(self) -> None:
        """Wait for the answer pool's warm-up (up to its startup timeout); say so when it
        did not come up (votes compare strings until it is)."""
        pool = await self.voter.warm_up()
        if pool != "warm":
            why = self.voter.warm_up_error()
            log.warning("the answer pool is %s (%s): votes compare strings", pool, why)

    async def aclose(self) -> None:
        if self._warming is not None:
            self._warming.cancel()
        await self.served.aclose()
        self.voter.close()

    def model_cards(self, key: ClientKey = ANONYMOUS) -> list[dict[str, Any]]:
        """``/v1/models`` entries ``key`` may use (its ``models`` allow-list, the rule
        that admits its runs: :meth:`~server.keys.KeyLimits.allows_model`): each base
        model, then its aliases, each with the runs this server executes at once
        (``ponder.max_concurrent_runs``, over all workers: the concurrency a client such
        as ``ponder eval`` needs to keep it full)."""
        runs = self.settings.max_concurrent_runs * self.settings.workers
        limits = key.limits
        cards = [
            card
            for card in self.served.model_cards()
            if limits.allows_model(card["id"], card["ponder"]["base_model"])
        ]
        for card in cards:
            card["ponder"]["max_concurrent_runs"] = runs
        return cards

    def resolve_model(self, model: str) -> tuple[ServedModel, Strategy]:
        """A model id (base, alias, or ``base+<spec>``) to its model and scaffold."""
        return self.served.resolve(model)

    def plan(self, endpoint: Endpoint, req: AnyRequest, key: ClientKey = ANONYMOUS) -> RunPlan:
        """Validate a request of ``key`` against the served models and limits; build its run."""
        return plan_run(self.served, self.settings, endpoint, req, key)

    async def readiness(self) -> tuple[bool, dict[str, Any]]:
        """Whether every model has a reachable engine and the answer pool is not still
        warming up (so no request would start it cold), with the detail."""
        ready, detail = await self.served.readiness()
        pool = self.voter.state
        detail["answer_pool"] = pool
        # A pool that failed to warm is not waited for: votes compare strings meanwhile
        # (logged at start), and a pool that never comes up must not keep a replica unready.
        if ready and pool == "starting":
            ready, detail["status"] = False, "starting"
        return ready, detail

    # -- handling ----------------------------------------------------------------------
    async def handle(
        self,
        endpoint: Endpoint,
        req: AnyRequest,
        receive: Receive,
        wire: WireFormat | None = None,
        key: ClientKey = ANONYMOUS,
    ) -> Response:
        """Plan, admit, run and answer one completion request; ``receive`` is the request's
        ASGI receive (its disconnect cancels the run). ``wire`` shapes the answer for
        another API (Responses, Anthropic Messages) than ``endpoint``'s own. ``key`` is
        the client key it came with: its limits are the request's, and it waits for a
        run slot, and its engine calls for sequences, in its key's turn
        (:class:`~server.runs.admission.RunLimiter`, :data:`~server.pool.sequences.run_key`)."""
        turn = run_key.set(key.name)  # the run's tasks, made below, inherit it
        try:
            return await self._handle(endpoint, req, receive, wire, key)
        finally:
            run_key.reset(turn)

    async def _handle(
        self,
        endpoint: Endpoint,
        req: AnyRequest,
        receive: Receive,
        wire: WireFormat | None,
        key: ClientKey,
    ) -> Response:
        started = time.perf_counter()
        base = req.model.partition("+")[0]  # labels stay bounded whatever the client sends
        label = wire.label if wire is not None else endpoint
        labels = {"endpoint": label, "model": base if base in self.models else "unknown"}
        labels["scaffold"] = "-"
        try:
            plan = self.plan(endpoint, req, key)
            labels.update(model=plan.served.config.name, scaffold=plan.scaffold)
            slot = self.limiter.admit(key)
        except Exception as exc:
            if isinstance(exc, KeyLimitError):
                self.metrics.key_refusals.labels(key=key.name, reason=exc.reason).inc()
            self._observe(labels, api_error(exc).status, started)
            raise
        try:
            if slot.free:  # taken at once: no wait for the client to leave during
                await slot.acquire()
            else:
                await self._until_disconnect(receive, slot.acquire())
            direct = await self._direct(receive, plan, wire)
            live: LiveRun | None = None
            if plan.stream and direct is None:  # up to its first answer: a 4xx before it
                settings = self.run_settings(plan)  # is this request's answer
                run = functools.partial(self._run, plan, settings)
                first = start_live(run, every_event=plan.stream_trace)
                live = await self._until_disconnect(receive, first)
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
                if live is not None:  # a body that never began leaves its run to us
                    live.result.cancel()
                slot.release()
                observe(499)  # counts a client that left before its stream began

            if live is not None:
                sse = (
                    chat_sse(plan, live, observe)
                    if wire is None
                    else wire_sse(plan, live, observe, wire)
                )
            else:
                assert wire is not None and direct is not None  # the engine's own stream
                sse = wire_sse(plan, direct, observe, wire)
            return SSEResponse(sse, on_close=close)
        try:
            if direct is not None:
                body = await self._until_disconnect(receive, direct.body())
            else:
                runs = await self._until_disconnect(receive, self._run_all(plan))
                if wire is None:
                    body = completion_body(plan, runs)
                else:
                    body = await self._until_disconnect(receive, wire.body(plan, runs))
        except BaseException as exc:
            self._observe(labels, _status_of(exc), started)
            raise
        finally:
            slot.release()
        self._observe(labels, 200, started)
        return FastJSONResponse(body)

    async def _direct(
        self, receive: Receive, plan: RunPlan, wire: WireFormat | None
    ) -> DirectCall | None:
        """The engine call that answers ``plan`` in ``wire``'s API without a run, opened
        (None: the plan is run)."""
        quota = self.limiter.quotas.pool(plan.key)  # a quota draws per step: the run path
        call = wire.direct(plan) if wire is not None and quota is None else None
        if call is None:
            return None

        def finished(usage: Usage, cut_reason: str | None) -> None:  # counted as a run
            self._record_run(plan, usage, cut_reason)

        if not await self._until_disconnect(receive, call.open(finished)):
            return None
        return call

    def _observe(self, labels: Mapping[str, str], status: int, started: float) -> None:
        self.metrics.requests.labels(**labels, status=str(status)).inc()
        self.metrics.request_latency.labels(**labels).observe(time.perf_counter() - started)

    async def _until_disconnect(self, receive: Receive, work: Awaitable[T]) -> T:
        try:
            return await until_disconnect(receive, work)
        except ClientDisconnectedError:
            self.metrics.disconnects.inc()
            raise

    async def _run_all(self, plan: RunPlan) -> list[tuple[RunResult, TraceRecorder]]:
        """One run per prompt (just one for chat), concurrently, each with its recorder.

        A strategy that passes through (``Strategy.passes_through``: one engine call of
        the prompt as asked) over several prompts shares one :class:`Coalescer` for this
        request, so the runs' calls go to the engine as ONE request when it takes a list
        of prompts (a multi-step scaffold's runs each call the engine on their own). The
        first failure is raised as is (its status is the response's) and cancels the
        other runs."""
        problems = plan.problems or (plan.problem,)
        settings = self.run_settings(plan)
        recorders = [TraceRecorder() for _ in problems]
        lists = batch_engine(plan.served.engine)
        if lists is None or len(problems) == 1 or not plan.strategy.passes_through:
            runs = [
                self._run(plan, settings, r, p) for r, p in zip(recorders, problems, strict=True)
            ]
            results = await gather(*runs)
            return list(zip(results, recorders, strict=True))
        coalescer = Coalescer(lists, len(problems))
        try:
            results = await gather(
                *(
                    coalescer.member(self._run(plan, settings, recorder, problem, coalescer))
                    for recorder, problem in zip(recorders, problems, strict=True)
                )
            )
        finally:
            await coalescer.aclose()
        return list(zip(results, recorders, strict=True))

    def run_settings(self, plan: RunPlan) -> RunSettings:
        """The settings every run of ``plan`` is made with: the request's, its served
        model's, and this server's voter."""
        served = plan.served
        return RunSettings(
            n=plan.n,
            budget=plan.budget,
            params=plan.params,
            prompts=served.prompts or served.config.prompts,
            chat=plan.endpoint == "chat",
            voter=self.voter,
            verifier=served.verifier,
            routing=served.routing,
            answer_format=plan.answer_format,
            quota=self.limiter.quotas.pool(plan.key),
        )

    async def _run(
        self,
        plan: RunPlan,
        settings: RunSettings,
        recorder: TraceRecorder,
        problem: Problem | None = None,
        engine: Engine | None = None,
    ) -> RunResult:
        if plan.effort is not None:  # the trace says which spec ran and why, first
            recorder.emit(StepNote("run", "effort", plan.effort.to_json()))
        try:
            result = await run_scaffold(
                plan.strategy,
                problem or plan.problem,
                engine or plan.served.engine,
                settings,
                recorder=recorder,
            )
        finally:
            recorder.close()
        self._record_run(plan, result.usage, result.cut_reason)
        return result

    def _record_run(self, plan: RunPlan, usage: Usage, cut_reason: str | None) -> None:
        """The metrics of a finished run (or engine call that answered without one)."""
        m, labels = self.metrics, {"model": plan.served.config.name, "scaffold": plan.scaffold}
        if cut_reason:
            m.budget_cutoffs.labels(**labels, reason=cut_reason).inc()
        m.run_tokens.labels(**labels, kind="prompt").inc(usage.prompt_tokens)
        m.run_tokens.labels(**labels, kind="completion").inc(usage.completion_tokens)
        m.run_engine_calls.labels(**labels).inc(usage.calls)
        m.count_key_run(plan.key.name, usage.prompt_tokens, usage.completion_tokens)


def _status_of(exc: BaseException) -> int:
    if isinstance(exc, asyncio.CancelledError):
        return 499
    return api_error(exc).status
