"""A verifier whose scores a test writes: :class:`ScriptedVerifier`.

It scores each candidate with ``rule`` (a float, or a process reward model's per-step
scores as a list: the outcome is the last), records every batch it was asked about, and
reports ``requests`` engine calls per batch (1 by default; a pooling-API reward model
takes one per candidate).

>>> import asyncio
>>> verifier = ScriptedVerifier(lambda text: 1.0 if "42" in text else 0.0)
>>> asyncio.run(verifier.verify("6*7?", ["41", "42"])).scores, verifier.batches
((0.0, 1.0), [('6*7?', ['41', '42'], None)])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from scaffolds.engines.protocol import Usage, Verdicts

__all__ = ["ScriptedVerifier"]


class ScriptedVerifier:
    """Scores by ``rule``; ``per_candidate``: one request per candidate, else one per
    batch; ``generated_tokens``: tokens each verdict generates (a generative verifier's 1)."""

    def __init__(
        self,
        rule: Callable[[str], float | list[float]],
        *,
        per_candidate: bool = False,
        generated_tokens: int = 0,
        name: str = "scripted",
    ) -> None:
        self.rule = rule
        self.per_candidate = per_candidate
        self.generated_tokens = generated_tokens
        self.name = name
        self.batches: list[tuple[str, list[str], str | None]] = []

    def requests(self, count: int) -> int:
        return count if self.per_candidate else 1

    async def verify(
        self, problem: str, candidates: Sequence[str], *, step: str | None = None
    ) -> Verdicts:
        self.batches.append((problem, list(candidates), step))
        raw = [self.rule(c) for c in candidates]
        steps = tuple(tuple(r) if isinstance(r, list) else (float(r),) for r in raw)
        usage = Usage(
            prompt_tokens=sum(len(c.split()) for c in candidates),
            completion_tokens=self.generated_tokens * len(candidates),
            calls=self.requests(len(candidates)),
        )
        has_steps = any(isinstance(r, list) for r in raw)
        return Verdicts(tuple(s[-1] for s in steps), steps if has_steps else None, usage)
