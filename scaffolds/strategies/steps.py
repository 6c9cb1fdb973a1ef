"""Step builders: each kind of step a strategy takes, usable by serving and training alike.

A strategy lists its :class:`StepBuilder` s (``step_builders``); what names a builder
and its steps is documented there. ``build`` turns the problem and the run's state
(candidates, a summary...) into the step's :class:`~scaffolds.problem.StepPrompt`,
and ``solve()`` calls it. Training looks builders up, never scaffolds: a GRPO rollout
makes the missing state with ``make_state`` and renders the prompt with ``build``; an
SFT row of a traced step is whatever ``rows`` keeps (each sample's extra columns, or
None to skip).

>>> from scaffolds.engines.mock import MockEngine
>>> from scaffolds.core.context import Context
>>> from scaffolds.problem import Problem
>>> from scaffolds.prompts import Template
>>> def echo_prompt(ctx, problem, state, parent=(None, None)):
...     return ctx.render(Template("echo", "$problem$word"), problem, word=state["word"])
>>> echo = StepBuilder("echo", "generate", ("echo",), build=echo_prompt)
>>> ctx = Context.root(MockEngine(lambda r: "x"), RunSettings(chat=False))
>>> echo.build(ctx, Problem.from_text("1+1="), {"word": "?"}).prompt
'1+1=?'
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from scaffolds.core.context import Context
from scaffolds.core.engine_calls import Step
from scaffolds.core.run_settings import RunSettings
from scaffolds.core.trace import StepFinished, StepNote, StepStarted, TraceEvent
from scaffolds.problem import Problem, StepPrompt
from scaffolds.prompts import PromptSet

__all__ = [
    "ContextLimits",
    "RowInputs",
    "StepBuilder",
    "TraceView",
    "TracedStep",
    "render_candidates",
    "render_step",
]


@dataclass(frozen=True, slots=True)
class ContextLimits:
    """How a rollout makes missing state with the policy: ``samples`` candidates, each
    call at most ``max_tokens`` (a summary ``summary_tokens``); None: the step's limit."""

    samples: int = 4
    max_tokens: int | None = None
    summary_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class TracedStep:
    """One finished engine call of a trace: its start (with provenance) and its end."""

    started: StepStarted
    finished: StepFinished
    order: int
    """Position among the run's steps, by start."""
    substitutes: Mapping[int, str | None] = field(default_factory=dict)
    """Samples of a helper step whose answer was empty, and the text the run passed on
    in its place (its thinking, or the prompt set's ``empty_step`` text), from the
    step's ``helper_text`` note; None where the note (an older trace) has no text."""

    @property
    def step_id(self) -> str:
        return self.started.step_id

    @property
    def kind(self) -> str:
        return self.started.kind

    @property
    def label(self) -> str:
        return self.started.label

    @property
    def scope(self) -> str:
        return self.started.parent_id or ""

    @property
    def template(self) -> str | None:
        return self.started.template

    @property
    def fields(self) -> Mapping[str, Any]:
        return self.started.fields or {}

    @property
    def texts(self) -> tuple[str, ...]:
        return self.finished.texts

    def used(self, sample: int) -> str:
        """The text of ``sample`` that later prompts read: its substitute, if it has one
        with a text, else the text the engine returned."""
        return self.substitutes.get(sample) or self.texts[sample]


class TraceView:
    """A run's finished steps in start order, with their parent links.

    >>> view = TraceView([])
    >>> view.steps, view.children("run:1", 0)
    ([], [])
    """

    def __init__(self, events: Iterable[TraceEvent]) -> None:
        events = list(events)
        substitutes = _substitutes(events)
        started: dict[str, tuple[int, StepStarted]] = {}
        steps: list[TracedStep] = []
        for event in events:
            if isinstance(event, StepStarted):
                started[event.step_id] = (len(started), event)
            elif (
                isinstance(event, StepFinished) and event.error is None and event.step_id in started
            ):
                order, start = started[event.step_id]
                used = substitutes.get(event.step_id, {})
                steps.append(TracedStep(start, event, order, used))
        self.steps = sorted(steps, key=lambda s: s.order)

    def get(self, step_id: str | None) -> TracedStep | None:
        """The step ``step_id`` (None if it is not a finished step of this trace)."""
        return next((s for s in self.steps if s.step_id == step_id), None)

    def children(self, step_id: str, sample: int | None) -> list[TracedStep]:
        """Steps that continue sample ``sample`` of ``step_id``, in order."""
        return [
            s for s in self.steps if s.started.parent_step == step_id and s.started.sample == sample
        ]

    def descendants(self, step_id: str, sample: int | None) -> list[TracedStep]:
        """Steps that continue that sample, directly or through other steps."""
        whole: set[str] = set()
        out: list[TracedStep] = []
        for step in self.steps:
            parent, index = step.started.parent_step, step.started.sample
            if parent in whole or (parent == step_id and index in (sample, None)):
                out.append(step)
                whole.add(step.step_id)
        return out


def _substitutes(events: list[TraceEvent]) -> dict[str, dict[int, str | None]]:
    """Per step id, the samples its ``helper_text`` note replaced and their texts."""
    found: dict[str, dict[int, str | None]] = {}
    for event in events:
        if isinstance(event, StepNote) and event.kind == "helper_text" and event.step_id:
            texts = event.values.get("texts") or {}
            samples = event.values.get("samples") or {}
            found[event.step_id] = {int(i): texts.get(i) for i in samples}
    return found


@dataclass(frozen=True)
class RowInputs:
    """What a row rule may read: the trace, the record's prompt set, a grader and options.

    ``grade(text)`` says whether a solution text is right (None: no gold answer).
    """

    view: TraceView
    prompts: PromptSet
    problem: str
    grade: Callable[[str], bool | None]
    options: Mapping[str, Any] = field(default_factory=dict)


Parent = tuple[str | None, int | None]
"""(step id, sample) a step continues."""


class BuildPrompt(Protocol):
    """Problem + the run's state (+ the step sample it continues) -> the step's prompt."""

    def __call__(
        self, ctx: Context, problem: Problem, state: Mapping[str, Any], /, parent: Parent = ...
    ) -> StepPrompt: ...


MakeState = Callable[[Context, Problem, dict[str, Any], ContextLimits], Awaitable[dict[str, Any]]]
RowRule = Callable[[TracedStep, int, RowInputs], dict[str, Any] | None]
Accepts = Callable[[TracedStep, RowInputs], bool]


def keep_correct(step: TracedStep, sample: int, inputs: RowInputs) -> dict[str, Any] | None:
    """The default row rule: keep a sample when it is right."""
    return {"correct": True} if inputs.grade(step.texts[sample]) else None


@dataclass(frozen=True)
class StepBuilder:
    """One kind of step: the names it goes by, and how to build and use it.

    A step is named four ways, each for its own reader, and each is written as it is in
    saved traces and datasets (so none can take another's value):

    - ``kind``: the builder's name, the ``kind`` of the SFT rows it makes
      (``training.data``: ``ponder train rows --kinds``).
    - ``trace_kind``: the ``kind`` its steps record in a trace
      (:attr:`~scaffolds.core.trace.StepStarted.kind`, what the server streams and a
      :class:`TracedStep` reads back); :meth:`generate` takes every step with it.
    - ``templates``: the templates its prompts are rendered from (the trace's
      ``template``; None: the problem as asked), by which :meth:`matches` finds its
      steps in a trace.
    - ``mode``: the GRPO rollout mode that practices the step (a dataset row's
      ``mode``; ``training.rollouts``), or None where none does. A builder that makes
      its own state (``make_state``) is practiced under its ``kind`` unless ``mode``
      names it otherwise.

    ``state`` names what ``build`` reads besides the problem (dataset columns of a GRPO
    row); ``rows`` and ``accepts`` decide its SFT rows.

    >>> from scaffolds.strategies.rc import REASONING
    >>> REASONING.kind, REASONING.trace_kind, REASONING.mode
    ('rc_reasoning', 'reasoning', 'rc_continue')
    >>> REASONING.templates
    ('rc_reasoning_start', 'rc_reasoning_continue', 'rc_reasoning')
    >>> from scaffolds.strategies.gsr import REFINE
    >>> REFINE.kind, REFINE.trace_kind, REFINE.mode, REFINE.templates
    ('gsr_refine', 'refine', 'gsr_refine', ('gsr_refine',))
    """

    kind: str
    trace_kind: str
    templates: tuple[str | None, ...]
    build: BuildPrompt | None = None
    state: tuple[str, ...] = ()
    make_state: MakeState | None = None
    mode: str | None = None
    rows: RowRule | None = keep_correct
    accepts: Accepts | None = None

    def __post_init__(self) -> None:
        if self.mode is None and self.make_state is not None:
            object.__setattr__(self, "mode", self.kind)

    async def generate(
        self,
        ctx: Context,
        problem: Problem,
        state: Mapping[str, Any],
        parent: Parent = (None, None),
        /,
        **options: Any,
    ) -> Step:
        """Take one step of this kind: ``build`` its prompt, then ``ctx.generate`` it with
        :attr:`trace_kind` (``options`` are ``ctx.generate``'s: label, n, max_tokens...),
        so the kind a run records is the builder's, written once.

        >>> import asyncio
        >>> from scaffolds.engines.mock import MockEngine
        >>> def echo_prompt(ctx, problem, state, parent=(None, None)):
        ...     return ctx.render_problem(problem)
        >>> echo = StepBuilder("echo", "generate", (None,), build=echo_prompt)
        >>> ctx = Context.root(MockEngine(lambda r: "2"), RunSettings(chat=False))
        >>> step = asyncio.run(echo.generate(ctx, Problem.from_text("1+1="), {}, label="answer"))
        >>> step.first.text
        '2'
        """
        if self.build is None:
            raise ValueError(f"step kind {self.kind!r} has no prompt builder")
        prompt = self.build(ctx, problem, state, parent)
        return await ctx.generate(prompt, kind=self.trace_kind, **options)

    def matches(self, step: TracedStep, inputs: RowInputs) -> bool:
        """Whether traced ``step`` is a step of this kind."""
        if step.template not in self.templates or step.started.fields is None:
            return False
        return self.accepts is None or self.accepts(step, inputs)


def render_candidates(
    ctx: Context,
    templates: PromptSet,
    template: str,
    problem: Problem,
    state: Mapping[str, Any],
    parent: Parent,
    /,
    *,
    recorded: tuple[str, ...] = (),
) -> StepPrompt:
    """Render ``templates``' ``template`` for ``problem`` and ``state["candidates"]``
    (texts): ``$candidates`` is the set's candidate list, ``$count`` how many; the
    candidates, and the keys of ``recorded`` that ``state`` has, are recorded as given.

    >>> from scaffolds.engines.mock import MockEngine
    >>> from scaffolds.strategies.gsr import GSR
    >>> ctx = Context.root(MockEngine(lambda r: ""), RunSettings(prompts="compact", chat=False))
    >>> problem, state = Problem.from_text("1+1="), {"candidates": ["2", "3"]}
    >>> step = render_candidates(ctx, ctx.templates(GSR), "gsr_refine", problem, state, (None, 0))
    >>> step.prompt, step.fields["candidates"], step.fields["count"], step.sample
    ('1+1=[2,3]', ['2', '3'], '2', 0)
    """
    candidates = list(state["candidates"])
    extra = {key: state[key] for key in recorded if key in state}
    return ctx.render(
        templates.template(template),
        problem,
        values={"candidates": candidates, **extra},
        parent=parent,
        candidates=templates.candidates(candidates),
        count=str(len(candidates)),
    )


def render_step(
    builder: StepBuilder,
    problem: str,
    state: Mapping[str, Any] | None = None,
    *,
    prompts: str = "default",
    chat: bool = False,
) -> StepPrompt:
    """``builder``'s prompt for ``problem`` outside a run (a dataset made without a trace).

    >>> from scaffolds.strategies.gsr import REFINE
    >>> render_step(REFINE, "3+4=", {"candidates": ["7", "8"]}, prompts="compact").prompt
    '3+4=[7,8]'
    """
    from scaffolds.engines.mock import MockEngine

    if builder.build is None:
        raise ValueError(f"step kind {builder.kind!r} has no prompt builder")
    ctx = Context.root(MockEngine(lambda request: ""), RunSettings(prompts=prompts, chat=chat))
    as_asked = Problem.from_text(problem) if not chat else Problem(problem)
    return builder.build(ctx, as_asked, state or {})
