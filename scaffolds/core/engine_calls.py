"""A scope's engine calls: the half of :class:`~scaffolds.core.context.Context` that runs a
step (budget, routing, helper text, forced answers) and notes what a strategy concluded.

:class:`StepCalls` is mixed into ``Context``, which holds the :class:`RunState` every
scope of one run shares and says which scope it is. A step's call reserves budget in
the run's ledger, derives its seed, runs on the model it is routed to
(:class:`~scaffolds.core.thinking.Routing`) and is traced by
:func:`scaffolds.core.traced_call.traced_call`; a helper step's text is never empty, and a sample
the budget cut gets a forced answer (:mod:`scaffolds.core.forcing`).

>>> derive_seed(7, "run:1") == derive_seed(7, "run:1") != derive_seed(7, "run:2")
True
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn

from scaffolds.core.forcing import plan_forced
from scaffolds.core.ledger import Ledger
from scaffolds.core.run_settings import RunSettings
from scaffolds.core.thinking import Thinking, helper_text
from scaffolds.core.trace import StepNote, StepStarted, TraceRecorder
from scaffolds.core.traced_call import traced_call
from scaffolds.core.traced_verify import traced_verify
from scaffolds.engines.protocol import (
    Completion,
    Engine,
    GenerateRequest,
    GenerateResult,
    Prompt,
    Verdicts,
    Verifier,
)
from scaffolds.errors import ContextFullError, ContextLengthError, EngineRejectedError
from scaffolds.evaluation.answers import AnswerFormat
from scaffolds.fanout import gather
from scaffolds.problem import StepPrompt
from scaffolds.prompts import PromptSet

__all__ = [
    "MAX_STOPS",
    "RunState",
    "Step",
    "StepCalls",
    "StepRole",
    "StepSampling",
    "derive_seed",
]

MAX_STOPS = 4
"""The most stop strings a call sends (OpenAI's limit, which vLLM enforces): a step's
own stop strings are added to the request's only while they fit."""


@dataclass(frozen=True, slots=True)
class Step:
    """What one engine call produced: its trace step id and its samples.

    ``cut_short`` is true when the budget, not the caller, limited the call and a
    sample hit that limit.
    """

    step_id: str
    completions: list[Completion]
    cut_short: bool = False
    answers: tuple[str | None, ...] = ()
    """Each sample's final answer, read as the run's ``answer_format`` asks (empty: read
    leniently by whoever needs it)."""

    @property
    def first(self) -> Completion:
        return self.completions[0]


@dataclass
class RunState:
    """Shared, mutable accounting of one run (one per root context), with the run's
    settings as its caller made them and the two they leave open, resolved: the prompt
    set (a name becomes its set) and the prompt form."""

    engine: Engine
    ledger: Ledger
    recorder: TraceRecorder
    settings: RunSettings
    prompts: PromptSet
    """``settings.prompts`` as a set."""
    chat: bool
    """``settings.chat`` decided: whether engine prompts are chat messages."""
    affinity_key: str | None = None
    step_counter: int = 0
    child_counters: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StepSampling:
    """A step's own sampling, over the request's (None: the request's own).

    >>> StepSampling(temperature=0.0, stop=("\\n\\n",)).top_logprobs is None
    True
    """

    temperature: float | None = None
    stop: Sequence[str] | None = None
    """Stop strings besides the request's own (those first; at most :data:`MAX_STOPS`
    in all)."""
    top_logprobs: int | None = None
    """Also ask for each position's top logprobs (deepconf)."""
    extra: Mapping[str, Any] | None = None
    """Engine fields passed through verbatim on this step's call, over the request's
    ``extra`` (s1's ``stop_token_ids``)."""


@dataclass(frozen=True, slots=True)
class StepRole:
    """What a step is to its run: whether it may give the final answer, how a cut
    sample gets one, and which model it runs on.

    >>> StepRole(helper=True).model is None
    True
    """

    final: bool = False
    """Its samples are the run's final answer (in a final scope)."""
    force_answer: bool = False
    """If the budget cut a sample short before it gave a ``\\boxed`` answer, ask for the
    final answer right away (the MRT "time is up" move)."""
    continue_final: bool = False
    """The chat prompt ends with a partial assistant message that the model continues
    (budget forcing)."""
    helper: bool = False
    """A helper step (summary, feedback, abstraction, judge): it runs on ``model``, else
    the run's helper model, else its own, with that model's thinking turned off (unless
    ``keep_thinking``: it thinks as that model does), and its text is never empty (see
    :meth:`StepCalls._usable`)."""
    model: str | None = None
    """The served model the step runs on (default: the run's own)."""
    keep_thinking: bool = False


class StepCalls:
    """Engine calls and notes of one scope of a run (mixed into ``Context``, which sets
    these attributes)."""

    _state: RunState
    scope_id: str
    scope: tuple[str, ...]
    final: bool
    choice: int | None
    parent: tuple[str, int] | None

    @property
    def answer_format(self) -> AnswerFormat:
        """How this run reads a sample's final answer (``boxed`` or ``lenient``)."""
        return self._state.settings.answer_format

    def _answer_reader(self, thinking: Thinking | None) -> Callable[[str], str | None]:
        """:meth:`answer` with ``thinking``, each distinct text read once: a step's trace
        event and its :class:`Step` share the reading (and equal samples share it)."""
        memo: dict[str, str | None] = {}

        def read(text: str) -> str | None:
            if text not in memo:
                memo[text] = self.answer(text, thinking)
            return memo[text]

        return read

    def answer(self, text: str, thinking: Thinking | None = None) -> str | None:
        """The final answer of a sample's ``text`` as the run reads answers (``boxed``:
        only the last ``\\boxed{}`` after the thinking of ``thinking``, default the run's
        model's; None when there is none)."""
        marks = (thinking or self._state.settings.routing.thinking).markers
        return marks.answer(text, self._state.settings.answer_format)

    def note(self, kind: str, values: Mapping[str, Any], *, step_id: str | None = None) -> None:
        """Record a :class:`~scaffolds.core.trace.StepNote` about this scope, or about one of
        its steps' samples (no engine call)."""
        note = StepNote(self.scope_id, kind, dict(values), self.choice, step_id=step_id)
        self._state.recorder.emit(note)

    async def generate(
        self,
        prompt: Prompt | StepPrompt,
        *,
        kind: str,
        label: str,
        n: int = 1,
        max_tokens: int | None = None,
        sampling: StepSampling | None = None,
        role: StepRole | None = None,
    ) -> Step:
        """One engine call of ``n`` samples (one request), within the budget.

        ``kind`` and ``label`` name the step in the trace; ``max_tokens`` bounds each
        sample (default: the request's), within what the budget grants. ``sampling`` is
        the step's own sampling over the request's (:class:`StepSampling`); ``role`` is
        what the step is to the run: its final answer, a helper, the model it runs on
        (:class:`StepRole`).
        Raises :class:`BudgetExhaustedError` if no budget is left to start.
        """
        sampling = sampling or StepSampling()
        role = role or StepRole()
        state = self._state
        params = state.settings.params
        engine, thinking = self._route(role.model, role.helper)
        source = prompt if isinstance(prompt, StepPrompt) else StepPrompt(prompt)
        if source.parent_step is None and self.parent is not None:
            source = StepPrompt(source.prompt, source.template, source.fields, *self.parent)
        wanted = max_tokens if max_tokens is not None else params.max_tokens
        grant = state.ledger.reserve(n, wanted, choice=self.choice)
        try:
            step_id = self._next_step_id()
            changes: dict[str, Any] = {"n": n, "max_tokens": grant.call_tokens}
            if sampling.temperature is not None:
                changes["temperature"] = sampling.temperature
            if sampling.stop is not None:  # added to the request's own, within OpenAI's limit
                merged = tuple(dict.fromkeys((*params.stop, *sampling.stop)))
                changes["stop"] = merged[: max(MAX_STOPS, len(params.stop))]
            if sampling.top_logprobs is not None:
                changes["top_logprobs"] = sampling.top_logprobs
            if params.seed is not None:
                changes["seed"] = derive_seed(params.seed, step_id)
            if role.final and self.final and params.final_extra:
                changes["extra"] = {**params.extra, **params.final_extra}
            if role.helper and thinking.off and not role.keep_thinking:
                changes["extra"] = {**params.extra, **thinking.off}
            if sampling.extra:
                changes["extra"] = {**changes.get("extra", params.extra), **sampling.extra}
            request = GenerateRequest(
                source.prompt,
                params.replace(**changes),
                affinity_key=state.affinity_key,
                continue_final=role.continue_final,
            )
            read = self._answer_reader(thinking)
            try:
                result = await self._recorded_call(
                    request,
                    step_id,
                    kind=kind,
                    label=label,
                    final=role.final and self.final,
                    source=source,
                    engine=engine,
                    answer_of=read,
                )
            except EngineRejectedError as exc:  # an engine that checks the context itself
                if exc.code != ContextLengthError.code:
                    raise
                self._context_full(label, exc.message)
            if result.no_room:
                self._context_full(label, None)
            completions = list(result.completions)
            if role.helper:
                completions = self._usable(completions, thinking, step_id)
            if role.force_answer and grant.held > 0:
                completions = await self._force_answers(
                    source.prompt,
                    completions,
                    label,
                    grant.held,
                    step_id,
                    role.continue_final,
                    engine=engine,
                    thinking=thinking,
                )
            cut = grant.bound and any(c.truncated for c in completions)
            if cut:  # the budget ended a sample: the run reports why
                state.ledger.cut("tokens")
            answers = tuple(read(c.text) for c in completions)
            return Step(step_id, completions, cut_short=cut, answers=answers)
        finally:
            state.ledger.release(n, grant)

    async def verify(
        self,
        verifier: Verifier,
        problem: str,
        candidates: Sequence[str],
        *,
        label: str,
        step: str | None = None,
        values: Mapping[str, Any] | None = None,
    ) -> Verdicts:
        """Score ``candidates`` with ``verifier``, within the budget: its requests and
        generated tokens are reserved first and its usage charged, as a ``verify`` step
        of the trace (``values`` adds to its recorded fields, e.g. the paths it scores).
        Raises :class:`BudgetExhaustedError` if no budget is left to start."""
        state = self._state
        count, calls = len(candidates), verifier.requests(len(candidates))
        grant = state.ledger.reserve(
            count, verifier.generated_tokens, calls=calls, choice=self.choice
        )
        try:
            step_id = self._next_step_id()
            fields = {"candidates": list(candidates), "verifier": verifier.name, **(values or {})}
            started = StepStarted(
                step_id=step_id,
                parent_id=self.scope_id,
                kind="verify",
                label=" > ".join((*self.scope, label)),
                n=count,
                choice=self.choice,
                template="verify",
                fields=fields,
            )
            return await traced_verify(
                verifier,
                problem,
                candidates,
                started,
                recorder=state.recorder,
                ledger=state.ledger,
                step=step,
            )
        finally:
            state.ledger.release(count, grant, calls=calls)

    def _context_full(self, label: str, detail: str | None) -> NoReturn:
        """A step's prompt left no room in the model's context: on the run's first call
        (none has finished) the request's prompt itself does not fit, a
        :class:`ContextLengthError`; later the run's growth ends, cut short
        (:class:`ContextFullError`, ``cut_reason`` "context")."""
        ledger = self._state.ledger
        if ledger.usage.calls == 0:
            raise ContextLengthError(
                detail
                or "the prompt leaves no room in the model's context (its maximum context "
                "length): reduce the length of the messages or prompt",
                param="messages" if self._state.chat else "prompt",
            )
        ledger.cut("context")
        raise ContextFullError(f"the {label} step's prompt fills the model's context")

    def _route(self, model: str | None, helper: bool) -> tuple[Engine, Thinking]:
        """The engine and thinking of the model a step runs on: ``model``, else (for a
        helper step) the run's helper model, else the run's own."""
        routing = self._state.settings.routing
        target = routing.target(model or (routing.helper if helper else None))
        if target is None:
            return self._state.engine, routing.thinking
        return target.engine, target.thinking

    def _usable(
        self, completions: list[Completion], thinking: Thinking, step_id: str
    ) -> list[Completion]:
        """A helper step's samples with text a prompt can carry: the part after the
        thinking; if that is empty, the thinking (a step cut mid-thought); if that is
        empty too, the prompt set's ``empty_step`` text. Each substitution is noted in
        the trace (``helper_text``: ``samples``: sample -> ``reasoning`` or ``empty``;
        ``texts``: sample -> the text passed on, which
        :attr:`~scaffolds.strategies.steps.TracedStep.substitutes` reads)."""
        out: list[Completion] = []
        origins: dict[str, str] = {}
        passed: dict[str, str] = {}
        for index, completion in enumerate(completions):
            text, origin = helper_text(completion, thinking)
            text = text or self._state.prompts.text("empty_step")
            if origin != "text":
                origins[str(index)], passed[str(index)] = origin, text
            out.append(replace(completion, text=text))
        if origins:
            self.note("helper_text", {"samples": origins, "texts": passed}, step_id=step_id)
        return out

    def _next_step_id(self) -> str:
        self._state.step_counter += 1
        return f"{self.scope_id}:{self._state.step_counter}"

    async def _recorded_call(
        self,
        request: GenerateRequest,
        step_id: str,
        *,
        kind: str,
        label: str,
        final: bool,
        source: StepPrompt,
        engine: Engine | None = None,
        answer_of: Callable[[str], str | None] | None = None,
    ) -> GenerateResult:
        """Call the engine, recording the step's provenance (see
        :mod:`scaffolds.core.traced_call`); ``answer_of`` reads the trace's answers
        (default: :meth:`answer`)."""
        state = self._state
        started = StepStarted(
            step_id=step_id,
            parent_id=self.scope_id,
            kind=kind,
            label=" > ".join((*self.scope, label)),
            n=request.params.n,
            final=final,
            prompt=request.prompt_text(),
            max_tokens=request.params.max_tokens,
            choice=self.choice,
            template=source.template,
            fields=None if source.fields is None else dict(source.fields),
            messages=(
                None
                if isinstance(request.prompt, str)
                else tuple(m.to_openai() for m in request.prompt)
            ),
            parent_step=source.parent_step,
            sample=source.sample,
        )
        return await traced_call(
            engine or state.engine,
            request,
            started,
            recorder=state.recorder,
            ledger=state.ledger,
            answer_of=answer_of or self.answer,
        )

    async def _force_answers(
        self,
        prompt: Prompt,
        completions: list[Completion],
        label: str,
        max_tokens: int,
        step_id: str,
        continued: bool = False,
        *,
        engine: Engine,
        thinking: Thinking,
    ) -> list[Completion]:
        """Ask each budget-truncated, answerless sample for its final answer now, on the
        model (``engine``, ``thinking``) that wrote it.

        The forced answers spend the tokens that the ledger held back; they are
        exempt from the call cap, so that a cut never leaves a sample without an answer.
        """

        async def force(index: int, completion: Completion) -> Completion:
            if not completion.truncated:
                return completion
            plan = plan_forced(
                prompt,
                completion,
                self._state.prompts,
                thinking,
                continued=continued,
                answered=lambda text: self.answer(text, thinking) is not None,
            )
            if plan is None:
                return completion
            self._state.ledger.cut("tokens")
            # The thinking is closed in the prompt, which a reasoning parser does not see:
            # the model's thinking-off fields make it read the answer as content.
            extra = {**self._state.settings.params.extra, **(thinking.off if plan.closed else {})}
            request = GenerateRequest(
                plan.prompt,
                self._state.settings.params.replace(
                    n=1, max_tokens=max_tokens, seed=None, top_logprobs=None, extra=extra
                ),
                affinity_key=self._state.affinity_key,
                continue_final=plan.same_message,
            )
            result = await self._recorded_call(
                request,
                self._next_step_id(),
                kind="force_answer",
                label=f"{label} (forced answer)",
                final=False,
                source=StepPrompt(plan.prompt, plan.template, {}, step_id, index),
                engine=engine,
            )
            return plan.joined(completion, result.completions[0], thinking)

        return list(await gather(*(force(i, c) for i, c in enumerate(completions))))


def derive_seed(seed: int, step_id: str) -> int:
    """A per-call seed: deterministic for one run shape, distinct between calls."""
    digest = hashlib.sha256(f"{seed}:{step_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF
