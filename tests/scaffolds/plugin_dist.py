"""A scaffold from a distribution of its own, written to a folder as pip installs one.

:func:`write_distribution` writes a package and its ``*.dist-info`` (``METADATA`` and an
``entry_points.txt`` with the group ``ponder.scaffolds``) under a folder; with that folder
on ``sys.path`` (:func:`installed`) or ``PYTHONPATH``, ``importlib.metadata`` finds the
distribution and Ponder's default registry loads its scaffold. No file of Ponder changes.
"""

from __future__ import annotations

import gc
import sys
import textwrap
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

PACKAGE = "ponder_recheck"
DISTRIBUTION = "ponder-recheck"
VERSION = "0.1"

RECHECK = '''
"""``recheck(rounds)``: draft an answer, then check the draft against the problem.

It has templates for the ``default`` prompt set only: a run with ``compact`` is refused.
"""

from typing import Any, ClassVar

from pydantic import Field

from scaffolds.prompts import PromptSet, Template
from scaffolds.core.engine_calls import StepRole
from scaffolds.core.solution import Solution
from scaffolds.strategies.base import Strategy
from scaffolds.strategies.single import Single
from scaffolds.strategies.steps import StepBuilder

CHECK = Template("recheck_check", "Problem: $problem\\nDraft: $draft\\nCheck it, then answer.")


def check_prompt(ctx, problem, state, parent=(None, None)):
    template = ctx.templates(Recheck).template("recheck_check")
    return ctx.render(template, problem, parent=parent, draft=state["draft"])


CHECK_STEP = StepBuilder(
    "recheck_check", "refine", ("recheck_check",), build=check_prompt, state=("draft",)
)


class Recheck(Strategy):
    name: ClassVar[str] = "recheck"
    summary: ClassVar[str] = "Draft an answer, then check the draft."
    prompt_sets: ClassVar[tuple[PromptSet, ...]] = (PromptSet.of("default", CHECK),)
    step_builders: ClassVar[tuple[StepBuilder, ...]] = (CHECK_STEP,)

    rounds: int = Field(default=1, ge=1, le=4)
    solver: Strategy = Single()

    async def solve(self, problem, ctx):
        current = await self.solver.solve(problem, ctx.child("draft"))
        for i in range(1, self.rounds + 1):
            step = await CHECK_STEP.generate(
                ctx, problem, {"draft": current.text}, current.source,
                label=f"check {i}", role=StepRole(final=True, force_answer=True),
            )
            current = Solution.from_step(step)
        return current

    def max_calls(self) -> int:
        return self.solver.max_calls() + self.rounds
'''
"""The scaffold's module: a class named by the entry point, with no ``@register``."""

MARKED = '''
"""Two strategies marked with ``@register``: an entry point names this module."""

from typing import ClassVar

from scaffolds.strategies.base import register
from scaffolds.strategies.single import Single


@register
class Once(Single):
    name: ClassVar[str] = "once"


@register
class Twice(Single):
    name: ClassVar[str] = "twice"
'''


def reply(text: str) -> str:
    """The engine's answer to a prompt: a wrong draft, then a right check."""
    return "checked: \\boxed{4}" if "Draft:" in text else "draft: \\boxed{5}"


def write_distribution(
    root: Path,
    entry_points: Mapping[str, str] | None = None,
    *,
    modules: Mapping[str, str] | None = None,
    name: str = DISTRIBUTION,
) -> Path:
    """Write the distribution ``name`` under ``root``: its modules (``{module: source}``,
    by default ``ponder_recheck`` = :data:`RECHECK`) and its ``ponder.scaffolds``
    entry points (``{name: "module:attr"}``). Returns ``root``."""
    modules = {PACKAGE: RECHECK} if modules is None else modules
    entry_points = {"recheck": f"{PACKAGE}:Recheck"} if entry_points is None else entry_points
    root.mkdir(parents=True, exist_ok=True)
    for module, source in modules.items():
        (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{name.replace('-', '_')}-{VERSION}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {VERSION}\n")
    lines = "".join(f"{key} = {value}\n" for key, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[ponder.scaffolds]\n{lines}")
    (info / "top_level.txt").write_text("".join(f"{m}\n" for m in modules))
    return root


@contextmanager
def installed(root: Path) -> Iterator[Path]:
    """``root`` on ``sys.path`` for the block; afterwards its modules are forgotten (and
    their ``@register`` marks dropped), so the default registry is as it was."""
    before = set(sys.modules)
    sys.path.insert(0, str(root))
    try:
        yield root
    finally:
        sys.path.remove(str(root))
        for module in set(sys.modules) - before:
            loaded = sys.modules[module]
            if str(root) in str(getattr(loaded, "__file__", "") or ""):
                for value in list(vars(loaded).values()):
                    if isinstance(value, type) and "registered" in vars(value):
                        value.registered = False  # type: ignore[attr-defined]
                del sys.modules[module]
        gc.collect()
