"""The run context: engine, budget, trace, prompts and structured concurrency.

A :class:`Context` is handed to every strategy. It is the only way a strategy talks to
an engine, so it can enforce the budget (through the run's :class:`~scaffolds.core.ledger.Ledger`),
account usage across every sub-call, record the trace and derive per-call seeds.
Children made with :meth:`Context.child` share one run state; fan-out goes through
:func:`scaffolds.fanout.gather` (an :class:`asyncio.TaskGroup`), so cancelling the run
cancels every engine call under it. This module is the scope handle (its state, children,
prompts and votes); :mod:`scaffolds.core.engine_calls` is how a scope calls the engine
(``generate``, ``note``).

>>> import asyncio
>>> from scaffolds.engines.mock import MockEngine
>>> settings = RunSettings(budget=Budget(max_calls=3))
>>> ctx = Context.root(MockEngine(lambda r: "\\\\boxed{7}"), settings)
>>> [c.text for c in asyncio.run(ctx.generate("3+4=", kind="generate", label="try")).completions]
['\\\\boxed{7}']
>>> ctx.usage.calls
1
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from scaffolds.core.engine_calls import RunState, StepCalls, derive_seed
from scaffolds.core.ledger import Ledger
from scaffolds.core.run_settings import RunSettings
from scaffolds.core.thinking import HelperModel, Thinking
from scaffolds.core.trace import TraceRecorder
from scaffolds.engines.protocol import Engine, Message, Prompt, Usage, Verifier
from scaffolds.problem import Budget, Problem, StepPrompt
from scaffolds.prompts import PromptSet, Template, common_prompts

__all__ = ["Context", "TemplateOwner"]


class TemplateOwner(Protocol):
    """What contributes templates to a run's prompt set (a strategy class)."""

    @classmethod
    def prompts_for(cls, name: str) -> PromptSet: ...


class Context(StepCalls):
    """A strategy's handle on the run. Make one with :meth:`root`; derive with :meth:`child`."""

    def __init__(
        self,
        state: RunState,
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
        settings: RunSettings | None = None,
        *,
        recorder: TraceRecorder | None = None,
        affinity_key: str | None = None,
    ) -> Context:
        """The run's root scope on ``engine``, made with ``settings`` (default: none
        named); ``settings.chat`` None means chat prompts. ``settings.n`` is the run's
        (:func:`~scaffolds.core.run.run_scaffold`), not a scope's."""
        settings = settings or RunSettings()
        prompts = settings.prompts
        state = RunState(
            engine=engine,
            ledger=Ledger.start(settings.budget, settings.quota),
            recorder=recorder or TraceRecorder(),
            settings=settings,
            prompts=common_prompts(prompts) if isinstance(prompts, str) else prompts,
            chat=True if settings.chat is None else settings.chat,
            affinity_key=affinity_key,
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
    def verifier(self) -> Verifier | None:
        """The verifier configured for this run's model, if any."""
        return self._state.settings.verifier

    def served_model(self, name: str) -> HelperModel:
        """The served model ``name``: its engine and how it thinks (an unknown name is
        an :class:`~scaffolds.errors.InvalidRequestError`)."""
        target = self._state.settings.routing.target(name)
        return HelperModel(self._state.engine) if target is None else target

    @property
    def thinking(self) -> Thinking:
        """How the run's model thinks (where its thinking ends)."""
        return self._state.settings.routing.thinking

    def thought(self, text: str, reasoning: str | None = None) -> str:
        """What a sample of the run's model thought (what an RC summary summarizes)."""
        return self.thinking.thought(text, reasoning)

    def shown(self, text: str) -> str:
        """A sample as another step reads it (a candidate): the part after its thinking."""
        return self.thinking.after(text)

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
        if self._state.settings.voter is not None:
            return await self._state.settings.voter.vote(answers)
        from scaffolds.evaluation.answers import majority_vote

        return majority_vote(answers)

    async def cluster(self, answers: Sequence[str | None]) -> list[list[int]]:
        """Indices of equivalent answers grouped, largest group first (the vote's groups)."""
        if self._state.settings.voter is not None:
            return await self._state.settings.voter.cluster(answers)
        from scaffolds.evaluation.answers import cluster_answers

        return cluster_answers(answers)

    def rng(self, label: str) -> random.Random:
        """A random generator for this scope's own draws (which members a step reads):
        seeded from the run's seed (0 when it has none), the scope and ``label``, so one
        run shape with one seed always draws the same."""
        seed = self._state.settings.params.seed or 0
        return random.Random(derive_seed(seed, f"{self.scope_id}/{label}"))
