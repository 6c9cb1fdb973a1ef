"""A new strategy from one file: class, templates, registration and step builders.

The strategy below is written to a temporary module and imported; no other file
changes. Its spec then parses, the server answers it with a trace, a prompt set it
lacks is refused by name, and training builds SFT rows and GRPO rollouts of its step.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from scaffolds.engines.mock import MockEngine
from scaffolds.errors import InvalidRequestError
from scaffolds.evaluation.problems import ProblemRow
from scaffolds.spec.build import build_strategy
from scaffolds.spec.registry import default_registry, get_prompt_set
from tests.server.conftest import build_app, chat_body
from training.grpo import grpo_rows
from training.pipeline import make_data
from training.rollouts import rollout_group, rollout_modes
from training.runs import RunDir, read_rows

MODULE = '''
"""``critic(rounds)``: draft an answer, then check it once against the problem."""

from typing import Any, ClassVar

from pydantic import Field

from scaffolds.evaluation.answers import extract_answer
from scaffolds.prompts import PromptSet, Template
from scaffolds.strategies.steps import StepBuilder
from scaffolds.core.engine_calls import StepRole
from scaffolds.core.solution import Solution
from scaffolds.strategies.base import Strategy, register
from scaffolds.strategies.single import Single

CHECK = Template("critic_check", "Problem: $problem\\nDraft: $draft\\nCheck it, then answer.")


def check_prompt(ctx, problem, state, parent=(None, None)):
    template = ctx.templates(Critic).template("critic_check")
    return ctx.render(template, problem, parent=parent, draft=state["draft"])


async def draft(ctx, problem, known, limits):
    if "draft" in known:
        return known
    step = await ctx.generate(ctx.render_problem(problem), kind="generate", label="draft")
    return {"draft": step.first.text}


CHECK_STEP = StepBuilder(
    "critic_check", "refine", ("critic_check",), check_prompt, ("draft",), draft, "critic_check"
)


@register
class Critic(Strategy):
    name: ClassVar[str] = "critic"
    prompt_sets: ClassVar[tuple[PromptSet, ...]] = (PromptSet.of("default", CHECK),)
    step_builders: ClassVar[tuple[StepBuilder, ...]] = (CHECK_STEP,)

    rounds: int = Field(default=1, ge=1, le=4)
    solver: Strategy = Single()

    async def solve(self, problem, ctx):
        current = await self.solver.solve(problem, ctx.child("draft"))
        for i in range(1, self.rounds + 1):
            prompt = check_prompt(ctx, problem, {"draft": current.text}, current.source)
            step = await ctx.generate(
                prompt, kind="refine", label=f"check {i}", role=StepRole(final=True)
            )
            text = step.first.text
            current = Solution(text, extract_answer(text), step.step_id)
        return current

    def max_calls(self) -> int:
        return self.solver.max_calls() + self.rounds
'''


def reply(request: Any) -> str:
    text = request.prompt_text()
    return "checked: \\boxed{4}" if "Draft:" in text else "draft: \\boxed{5}"


@pytest.fixture
def critic(tmp_path: Path) -> Iterator[ModuleType]:
    (tmp_path / "ponder_critic.py").write_text(textwrap.dedent(MODULE))
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module("ponder_critic")
        yield module
    finally:
        sys.path.remove(str(tmp_path))
        module = sys.modules.pop("ponder_critic")
        module.Critic.registered = False  # leave the default registry as it was
        del module
        gc.collect()


def test_the_spec_parses_and_prints(critic: ModuleType) -> None:
    strategy = build_strategy("critic(rounds=2)")
    assert isinstance(strategy, critic.Critic) and str(strategy) == "critic(rounds=2)"
    assert "critic" in default_registry().names()
    assert "critic_check" in get_prompt_set("default").templates


async def test_the_server_answers_it_with_a_trace(critic: ModuleType) -> None:
    app, engine = build_app(reply)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://ponder.test") as client:
        r = await client.post(
            "/v1/chat/completions", json=chat_body(scaffold="critic", return_trace=True)
        )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["choices"][0]["message"]["content"] == "checked: \\boxed{4}"
    trace = body["trace"]
    started = [e for e in trace if e["type"] == "step_started"]
    assert [e["template"] for e in started] == [None, "critic_check"]
    check = started[1]
    assert check["fields"] == {"problem": "2+2?", "draft": "draft: \\boxed{5}"}
    assert check["parent_step"] == started[0]["step_id"] and check["sample"] == 0
    assert check["messages"][-1]["content"].startswith("Problem: 2+2?\nDraft: draft:")
    assert len(engine.requests) == 2


async def test_a_prompt_set_it_lacks_is_refused_by_name(critic: ModuleType) -> None:
    with pytest.raises(InvalidRequestError, match="'critic' has no templates for prompt set"):
        critic.Critic.prompts_for("compact")
    app, _ = build_app(reply, prompts="compact")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://ponder.test") as client:
        r = await client.post("/v1/chat/completions", json=chat_body(scaffold="gsr(solver=critic)"))
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["message"] == (
        "strategy 'critic' has no templates for prompt set 'compact' (it has: default)"
    )
    assert error["param"] == "prompt_set"


def test_training_builds_sft_rows_and_rollouts_of_its_step(
    critic: ModuleType, tmp_path: Path
) -> None:
    run = RunDir(tmp_path / "run")
    problems = [ProblemRow("p1", "2+2?", "4"), ProblemRow("p2", "3+1?", "4")]
    report = asyncio.run(
        make_data(
            run,
            problems,
            MockEngine(reply),
            scaffold="critic",
            chat=True,
            progress=False,
            inline_grading=True,
        )
    )
    assert report.counts == {"critic_check": 2}
    first, _ = read_rows(report.paths["critic_check"])
    asked = "Problem: 2+2?\nDraft: draft: \\boxed{5}\nCheck it, then answer."
    assert first["prompt"] == [{"role": "user", "content": asked}]
    assert first["completion"] == [{"role": "assistant", "content": "checked: \\boxed{4}"}]
    assert len(read_rows(report.paths["sft"])) == 2

    assert "critic_check" in rollout_modes()
    [row] = grpo_rows([{"id": "p1", "problem": "2+2?", "answer": "4"}], {"critic_check": 1})
    group = asyncio.run(rollout_group(row, MockEngine(reply), n=3))
    assert group.plan.kind == "refine" and group.plan.context == {"draft": "draft: \\boxed{5}"}
    assert group.plan.prompt == asked
    assert [c.text for c in group.completions] == ["checked: \\boxed{4}"] * 3
