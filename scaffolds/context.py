"""The run context: engine, budget, trace, prompts and structured concurrency.

A :class:`Context` is handed to every strategy. It is the only way a strategy talks to
an engine, so it can enforce the budget (through the run's :class:`~scaffolds.ledger.Ledger`),
account usage across every sub-call, record the trace and derive per-call seeds.
Children made with :meth:`Context.child` share one run state; fan-out goes through
:func:`scaffolds.fanout.gather` (an :class:`asyncio.TaskGroup`), so cancelling the run
cancels every engine call under it.

>>> import asyncio
>>> from scaffolds.engines.mock import MockEngine
>>> ctx = Context.root(MockEngine(lambda r: "\\\\boxed{7}"), budget=Budget(max_calls=3))
>>> [c.text for c in asyncio.run(ctx.generate("3+4=", kind="generate", label="try")).completions]
['\\\\boxed{7}']
>>> ctx.usage.calls
1
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from scaffolds.answers import extract_answer
from scaffolds.calls import traced_call
from scaffolds.engine import (
    Completion,
    Engine,
    GenerateRequest,
    GenerateResult,
    Message,
    Prompt,
    RewardModel,
    SamplingParams,
    Usage,
)
from scaffolds.errors import ContextFullError
from scaffolds.fanout import gather
from scaffolds.forcing import forced_prompt, with_forced_answer
from scaffolds.ledger import Ledger
from scaffolds.problem import Budget, Problem, StepPrompt
from scaffolds.prompts import PromptSet, Template, common_prompts
from scaffolds.trace import StepNote, StepStarted, TraceRecorder

__all__ = [
    "Budget",
    "Context",
    "Problem",
    "Step",
    "StepPrompt",
    "TemplateOwner",
    "Voter",
]


@dataclass(frozen=True, slots=True)
class Step:
    """What one engine call produced: its trace step id and its samples.

    ``cut_short`` is true when the budget, not the caller, limited the call and a
    sample hit that limit.
    """

    step_id: str
    completions: list[Completion]
    cut_short: bool = False

    @property
    def first(self) -> Completion:
        return self.completions[0]


class TemplateOwner(Protocol):
    """What contributes templates to a run's prompt set (a strategy class)."""

    @classmethod
    def prompts_for(cls, name: str) -> PromptSet: ...


class Voter(Protocol):
    """Picks the winning answer of a vote (e.g. :class:`scaffolds.answer_pool.AnswerChecker`,
    which runs math-verify in a process pool with a time limit), and groups equivalent
    answers (for votes that weigh their members)."""

    async def vote(self, answers: Sequence[str | None]) -> int | None: ...

    async def cluster(self, answers: Sequence[str | None]) -> list[list[int]]: ...


@dataclass
class _RunState:
    """Shared, mutable accounting of one run (one per root context)."""

    engine: Engine
    ledger: Ledger
    recorder: TraceRecorder
    prompts: PromptSet
    params: SamplingParams
    chat: bool
    voter: Voter | None = None
    affinity_key: str | None = None
    reward_model: RewardModel | None = None
    step_counter: int = 0
    child_counters: dict[str, int] = field(default_factory=dict)


class Context:
    """A strategy's handle on the run. Make one with :meth:`root`; derive with :meth:`child`."""

    def __init__(
        self,
        state: _RunState,
        scope_id: str,
        scope: tuple[str, ...],
        final: bool,
        choice: int | None = None,
        parent: tuple[str, int] | None = None,
    ):
        self._state = state
        self.scope_id = scope_id
        """Hierarchical and dotted: ``run.2.1`` is the first child of ``run.2``."""
        self.scope = scope
        self.final = final
        self.choice = choice
        self.parent = parent
        """(step id, sample) that steps in this scope continue, unless they say otherwise."""

    @classmethod
    def root(
        cls,
        engine: Engine,
        *,
        budget: Budget | None = None,
        recorder: TraceRecorder | None = None,
        prompts: PromptSet | str = "default",
        params: SamplingParams | None = None,
        chat: bool = True,
        voter: Voter | None = None,
        affinity_key: str | None = None,
        reward_model: RewardModel | None = None,
    ) -> Context:
        state = _RunState(
            engine=engine,
            ledger=Ledger.start(budget or Budget()),
            recorder=recorder or TraceRecorder(),
            prompts=common_prompts(prompts) if isinstance(prompts, str) else prompts,
            params=params or SamplingParams(),
            chat=chat,
            voter=voter,
            affinity_key=affinity_key,
            reward_model=reward_model,
        )
        return cls(state, "run", (), final=True)

    # -- accessors -------------------------------------------------------------------
    @property
    def usage(self) -> Usage:
        return self._state.ledger.usage

    @property
    def recorder(self) -> TraceRecorder:
        return self._state.recorder

    @property
    def prompts(self) -> PromptSet:
        """The run's prompt set: its shared templates (and any a caller put in)."""
        return self._state.prompts

    def templates(self, owner: type[TemplateOwner]) -> PromptSet:
        """The run's set with ``owner``'s own templates for it; a set the owner lacks
        raises an error naming both."""
        run_set = self._state.prompts
        return owner.prompts_for(run_set.name).merged(run_set)

    @property
    def budget(self) -> Budget:
        return self._state.ledger.budget

    @property
    def reward_model(self) -> RewardModel | None:
        """The reward model configured for this run's model, if any."""
        return self._state.reward_model

    @property
    def cut_reason(self) -> str | None:
        """Why the budget cut the run short, if it did."""
        return self._state.ledger.cut_reason

    def child(
        self,
        label: str,
        *,
        final: bool = False,
        choice: int | None = None,
        parent: tuple[str, int] | None = None,
    ) -> Context:
        """A nested scope (e.g. "candidate 2"). Only a final scope inside a final scope
        may mark its steps as the run's final answer. ``choice`` tags every step below
        with the response choice it serves; ``parent`` (step id, sample) is the step
        sample that steps below continue, unless they name their own."""
        n = self._state.child_counters.get(self.scope_id, 0) + 1
        self._state.child_counters[self.scope_id] = n
        return Context(
            self._state,
            f"{self.scope_id}.{n}",
            (*self.scope, label),
            final and self.final,
            self.choice if choice is None else choice,
            self.parent if parent is None else parent,
        )

    # -- prompts ---------------------------------------------------------------------
    def problem_prompt(self, problem: Problem) -> Prompt:
        """The problem as the caller sent it (pass-through), in this run's prompt form."""
        raw = problem.raw_prompt
        if raw is not None and isinstance(raw, str) != self._state.chat:
            return raw
        if not self._state.chat:
            return problem.text
        return (*problem.history, Message("user", problem.text))

    def render_problem(self, problem: Problem) -> StepPrompt:
        """:meth:`problem_prompt` with its provenance (the problem's own, if it was
        rendered from a template)."""
        origin = problem.origin
        prompt = self.problem_prompt(problem)
        if origin is None:
            return StepPrompt(prompt, None, {"problem": problem.text})
        return StepPrompt(prompt, origin.template, origin.fields, origin.parent_step, origin.sample)

    def render(
        self,
        template: Template,
        problem: Problem,
        /,
        *,
        values: Mapping[str, Any] | None = None,
        parent: tuple[str | None, int | None] | None = None,
        **fields: str,
    ) -> StepPrompt:
        """:meth:`prompt` with its provenance: the template's name, the field values
        (``values`` records structured ones, e.g. a list of candidates, in place of
        their rendered text) and the (step id, sample) it continues."""
        recorded: dict[str, Any] = {"problem": problem.text, **fields, **(values or {})}
        step, sample = parent if parent is not None else (None, None)
        prompt = self.prompt(template, problem, **fields)
        return StepPrompt(prompt, template.name, recorded, step, sample)

    def prompt(self, template: Template, problem: Problem, /, **fields: str) -> Prompt:
        """Render ``template`` for ``problem`` into an engine prompt (chat or text, as the
        run uses). The template's ``$problem`` field is the problem text.

        The problem's history goes first and the rendered template is the last user
        turn, so every sub-call of one problem shares a prefix with the others.
        """
        text = template.render(problem=problem.text, **fields)
        if not self._state.chat:
            return text
        return (*problem.history, Message("user", text))

    async def vote(self, answers: Sequence[str | None]) -> int | None:
        """Index of a representative of the most common answer (None if none)."""
        if self._state.voter is not None:
            return await self._state.voter.vote(answers)
        from scaffolds.answers import majority_vote

        return majority_vote(answers)

    async def cluster(self, answers: Sequence[str | None]) -> list[list[int]]:
        """Indices of equivalent answers grouped, largest group first (the vote's groups)."""
        if self._state.voter is not None:
            return await self._state.voter.cluster(answers)
        from scaffolds.answers import cluster_answers

        return cluster_answers(answers)

    def rng(self, label: str) -> random.Random:
        """A random generator for this scope's own draws (which members a step reads):
        seeded from the run's seed (0 when it has none), the scope and ``label``, so one
        run shape with one seed always draws the same."""
        seed = self._state.params.seed or 0
        return random.Random(_derive_seed(seed, f"{self.scope_id}/{label}"))

    def note(self, kind: str, values: Mapping[str, Any], *, step_id: str | None = None) -> None:
        """Record a :class:`~scaffolds.trace.StepNote` about this scope, or about one of
        its steps' samples (no engine call)."""
        note = StepNote(self.scope_id, kind, dict(values), self.choice, step_id=step_id)
        self._state.recorder.emit(note)

    # -- engine calls ----------------------------------------------------------------
    async def generate(
        self,
        prompt: Prompt | StepPrompt,
        *,
        kind: str,
        label: str,
        n: int = 1,
        max_tokens: int | None = None,
        final: bool = False,
        force_answer: bool = False,
        temperature: float | None = None,
        stop: Sequence[str] | None = None,
        top_logprobs: int | None = None,
        continue_final: bool = False,
    ) -> Step:
        """One engine call of ``n`` samples (one request), within the budget.

        ``force_answer``: if the budget cut a sample short before it gave a ``\\boxed``
        answer, ask for the final answer right away (the MRT "time is up" move).
        ``top_logprobs``: also ask for each position's top logprobs (deepconf);
        ``continue_final``: the chat prompt ends with a partial assistant message that
        the model continues (budget forcing).
        Raises :class:`BudgetExhaustedError` if no budget is left to start.
        """
        state = self._state
        source = prompt if isinstance(prompt, StepPrompt) else StepPrompt(prompt)
        if source.parent_step is None and self.parent is not None:
            source = StepPrompt(source.prompt, source.template, source.fields, *self.parent)
        wanted = max_tokens if max_tokens is not None else state.params.max_tokens
        grant = state.ledger.reserve(n, wanted)
        try:
            step_id = self._next_step_id()
            changes: dict[str, Any] = {"n": n, "max_tokens": grant.call_tokens}
            if temperature is not None:
                changes["temperature"] = temperature
            if stop is not None:
                changes["stop"] = tuple(stop)
            if top_logprobs is not None:
                changes["top_logprobs"] = top_logprobs
            if state.params.seed is not None:
                changes["seed"] = _derive_seed(state.params.seed, step_id)
            if final and self.final and state.params.final_extra:
                changes["extra"] = {**state.params.extra, **state.params.final_extra}
            request = GenerateRequest(
                source.prompt,
                state.params.replace(**changes),
                affinity_key=state.affinity_key,
                continue_final=continue_final,
            )
            result = await self._recorded_call(
                request, step_id, kind=kind, label=label, final=final and self.final, source=source
            )
            if result.no_room:
                state.ledger.cut("context")
                raise ContextFullError(f"the {label} step's prompt fills the model's context")
            completions = list(result.completions)
            clamped = grant.held > 0
            if force_answer and clamped:
                completions = await self._force_answers(
                    source.prompt, completions, label, grant.held, step_id, continue_final
                )
            cut = clamped and any(c.truncated for c in completions)
            return Step(step_id, completions, cut_short=cut)
        finally:
            state.ledger.release(n, grant)

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
    ) -> GenerateResult:
        """Call the engine, recording the step's provenance (see :mod:`scaffolds.calls`)."""
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
            state.engine, request, started, recorder=state.recorder, ledger=state.ledger
        )

    async def _force_answers(
        self,
        prompt: Prompt,
        completions: list[Completion],
        label: str,
        max_tokens: int,
        step_id: str,
        continued: bool = False,
    ) -> list[Completion]:
        """Ask each budget-truncated, answerless sample for its final answer now.

        The forced answers spend the tokens that the ledger held back; they are
        exempt from the call cap, so that a cut never leaves a sample without an answer.
        """

        async def force(index: int, completion: Completion) -> Completion:
            if not completion.truncated or extract_answer(completion.text) is not None:
                return completion
            self._state.ledger.cut("tokens")
            cue = self.prompts.template("force_answer").render()
            forced = forced_prompt(prompt, completion, cue, continued=continued)
            request = GenerateRequest(
                forced,
                self._state.params.replace(
                    n=1, max_tokens=max_tokens, seed=None, top_logprobs=None
                ),
                affinity_key=self._state.affinity_key,
            )
            result = await self._recorded_call(
                request,
                self._next_step_id(),
                kind="force_answer",
                label=f"{label} (forced answer)",
                final=False,
                source=StepPrompt(forced, "force_answer", {}, step_id, index),
            )
            return with_forced_answer(completion, cue, result.completions[0])

        return list(await gather(*(force(i, c) for i, c in enumerate(completions))))


def _derive_seed(seed: int, step_id: str) -> int:
    """A per-call seed: deterministic for one run shape, distinct between calls."""
    digest = hashlib.sha256(f"{seed}:{step_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF
