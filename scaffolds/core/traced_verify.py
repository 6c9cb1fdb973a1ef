"""One verifier call of a run, traced and accounted like an engine call: a
:class:`StepStarted` of kind ``verify`` (its candidates in ``fields``), the call under
the run's deadline, then :class:`StepFinished` (each candidate's score as its text, the
verifier's usage) and a ``scores`` :class:`StepNote` with the numbers (and a process
reward model's per-step scores); the usage is charged to the run's ledger.

>>> import asyncio
>>> from scaffolds.problem import Budget
>>> from scaffolds.engines.protocol import Usage
>>> class Length:
...     name, generated_tokens = "length", 0
...     def requests(self, count): return 1
...     async def verify(self, problem, candidates, *, step=None):
...         return Verdicts(tuple(float(len(c)) for c in candidates), usage=Usage(calls=1))
>>> ledger, recorder = Ledger.start(Budget()), TraceRecorder()
>>> started = StepStarted(step_id="run:1", parent_id="run", kind="verify", label="verify")
>>> call = traced_verify(Length(), "2+2?", ["4", "five"], started, recorder=recorder,
...                      ledger=ledger)
>>> asyncio.run(call).scores, [e.type for e in recorder.events], ledger.usage.calls
((1.0, 4.0), ['step_started', 'step_finished', 'step_note'], 1)
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from scaffolds.core.ledger import Ledger
from scaffolds.core.trace import StepFinished, StepNote, StepStarted, TraceRecorder
from scaffolds.core.traced_call import step_failures_traced
from scaffolds.engines.protocol import Verdicts, Verifier
from scaffolds.errors import EngineError

__all__ = ["score_text", "traced_verify"]


async def traced_verify(
    verifier: Verifier,
    problem: str,
    candidates: Sequence[str],
    started: StepStarted,
    *,
    recorder: TraceRecorder,
    ledger: Ledger,
    step: str | None = None,
) -> Verdicts:
    """Ask ``verifier`` about ``candidates`` with the step's trace events around it.

    A verifier that answers with the wrong number of scores is an :class:`EngineError`;
    one still running at the run's deadline raises :class:`DeadlineExceededError`.
    """
    step_id = started.step_id
    recorder.emit(started)
    with step_failures_traced(step_id, recorder, ledger):
        async with asyncio.timeout_at(ledger.loop_deadline()):
            verdicts = await verifier.verify(problem, candidates, step=step)
        if len(verdicts.scores) != len(candidates):
            raise EngineError(
                f"verifier {verifier.name!r} gave {len(verdicts.scores)} scores for "
                f"{len(candidates)} candidates"
            )
    ledger.charge(verdicts.usage, started.choice)
    count = len(candidates)
    recorder.emit(
        StepFinished(
            step_id,
            texts=tuple(score_text(s) for s in verdicts.scores),
            answers=(None,) * count,
            finish_reasons=("stop",) * count,
            usage=verdicts.usage,
            completion_tokens=(0,) * count,
        )
    )
    values: dict[str, object] = {"scores": list(verdicts.scores), "verifier": verifier.name}
    if verdicts.steps is not None:
        values["steps"] = [list(s) for s in verdicts.steps]
    recorder.emit(StepNote(started.parent_id or "", "scores", values, started.choice, step_id))
    return verdicts


def score_text(score: float) -> str:
    """How a score reads in the trace and the stream.

    >>> score_text(0.83127)
    'score 0.8313'
    """
    return f"score {score:.4f}"
