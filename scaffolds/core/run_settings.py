"""What a run is made with, besides its strategy, problem and engine: one frozen object.

:class:`RunSettings` is built once by a caller (the server from a request's plan, the
eval client, training) and passed as it is through :func:`scaffolds.solve`,
:func:`scaffolds.core.run.run_scaffold` and :meth:`scaffolds.core.context.Context.root`
into the run's :class:`~scaffolds.core.engine_calls.RunState`, so every layer sees the
same values. :class:`Voter` is what settles a run's votes.

>>> from scaffolds.problem import Budget
>>> settings = RunSettings(n=2, budget=Budget(max_calls=8), answer_format="boxed")
>>> settings.n, settings.budget.max_calls, settings.prompts, settings.chat
(2, 8, 'default', None)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from scaffolds.core.ledger import TokenPool
from scaffolds.core.thinking import Routing
from scaffolds.engines.protocol import SamplingParams, Verifier
from scaffolds.evaluation.answers import AnswerFormat
from scaffolds.problem import Budget
from scaffolds.prompts import PromptSet

__all__ = ["RunSettings", "Voter"]


class Voter(Protocol):
    """Picks the winning answer of a vote (e.g.
    :class:`scaffolds.evaluation.answer_pool.AnswerChecker`,
    which runs math-verify in a process pool with a time limit), and groups equivalent
    answers (for votes that weigh their members)."""

    async def vote(self, answers: Sequence[str | None]) -> int | None: ...

    async def cluster(self, answers: Sequence[str | None]) -> list[list[int]]: ...


@dataclass(frozen=True, slots=True)
class RunSettings:
    """The settings of one run, with the defaults a caller that names none gets."""

    n: int = 1
    """Choices (independent answers) the run returns."""
    budget: Budget = field(default_factory=Budget)
    """The run's one shared budget (calls, tokens, deadline)."""
    params: SamplingParams = field(default_factory=SamplingParams)
    """The request's sampling parameters (its seed derives each call's)."""
    prompts: PromptSet | str = "default"
    """The prompt set, or the name of a built-in one."""
    chat: bool | None = None
    """Whether engine prompts are chat messages (None: as the problem came; for a bare
    :meth:`~scaffolds.core.context.Context.root`, chat)."""
    voter: Voter | None = None
    """Settles votes (None: :func:`scaffolds.evaluation.answers.majority_vote`)."""
    verifier: Verifier | None = None
    """Scores candidates for the scaffolds that use one (:mod:`scaffolds.verifiers`)."""
    routing: Routing = field(default_factory=Routing)
    """How the model thinks and which served models helper steps may run on."""
    answer_format: AnswerFormat = "lenient"
    """How a sample's final answer is read: ``boxed`` or ``lenient``."""
    quota: TokenPool | None = None
    """Generated tokens shared with other runs (a client key's quota): every call's grant
    is drawn from it, and a call it bounds cuts the run (``cut_reason`` "quota")."""
