"""The registry: the built-ins as one list, entry points of other distributions, traits,
optional prompt sets, and the step kinds a run records, all read from the registry."""

from __future__ import annotations

import ast
import asyncio
import importlib
import pkgutil
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from pydantic import ValidationError

import scaffolds.strategies
from scaffolds import RunSettings, solve
from scaffolds.engines.mock import MockEngine
from scaffolds.errors import InvalidRequestError, ScaffoldLoadError
from scaffolds.prompts import PROMPT_SET_NAMES, PromptSet, Template
from scaffolds.spec.registry import (
    Registry,
    builtin_registry,
    default_registry,
    get_prompt_set,
)
from scaffolds.strategies import BUILTINS, Single
from scaffolds.strategies.base import Strategy
from scaffolds.strategies.steps import TraceView
from testing.scripted_verifier import ScriptedVerifier
from tests.scaffolds.plugin_dist import MARKED, PACKAGE, installed, reply, write_distribution

ROOT = Path(__file__).resolve().parents[2]
NOT_STRATEGIES = {"base", "steps"}
"""Modules of ``scaffolds/strategies`` that define no strategy."""


# -- the built-ins ---------------------------------------------------------------------------
def test_every_strategy_module_is_listed_once_in_the_builtins() -> None:
    defined = []
    for info in pkgutil.iter_modules(scaffolds.strategies.__path__):
        if info.name in NOT_STRATEGIES:
            continue
        module = importlib.import_module(f"scaffolds.strategies.{info.name}")
        classes = [
            value
            for value in vars(module).values()
            if isinstance(value, type)
            and issubclass(value, Strategy)
            and value.__module__ == module.__name__
        ]
        assert classes, f"scaffolds/strategies/{info.name}.py defines no strategy"
        defined += classes
    assert sorted(defined, key=lambda c: c.name) == sorted(BUILTINS, key=lambda c: c.name)
    assert len({cls.name for cls in BUILTINS}) == len(BUILTINS)
    assert builtin_registry().names() == sorted(cls.name for cls in BUILTINS)
    assert set(builtin_registry().names()) <= set(default_registry().names())


def test_the_server_names_no_scaffold() -> None:
    """No string of ``server/`` is a scaffold name, the default scaffold setting aside:
    what the server needs to know about a strategy is its traits."""
    # "auto" is also an ordinary value there (tool_choice, responses_api, the effort level)
    names = set(builtin_registry().names()) - {"auto"}
    allowed = {("server/model_settings.py", "single")}  # the default_scaffold setting
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}"
        for path in sorted((ROOT / "server").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant)
        and node.value in names
        and (str(path.relative_to(ROOT)), node.value) not in allowed
    ]
    assert not found, found


def test_traits_have_defaults_and_the_builtins_set_them() -> None:
    assert Strategy.passes_through is False and Strategy.answer_logprobs_refused is None
    passing = [cls.name for cls in BUILTINS if cls.passes_through]
    refusing = {cls.name for cls in BUILTINS if cls.answer_logprobs_refused}
    assert passing == ["single"]
    assert refusing == {"beam", "budget_forcing", "deepconf", "particle_filter"}


# -- step kinds ------------------------------------------------------------------------------
def _runnable(cls: type[Strategy], prompts: str) -> Strategy | None:
    """``cls`` with its defaults, if it has them and supports the set ``prompts``."""
    try:
        strategy = cls()
        strategy.check_prompt_set(prompts)
    except (ValidationError, InvalidRequestError):
        return None
    return strategy


@pytest.mark.parametrize("prompts", PROMPT_SET_NAMES)
def test_every_step_records_its_builders_kind(prompts: str) -> None:
    """A traced step whose template is a builder's has that builder's ``trace_kind``, in
    a default run of every built-in (those that need parameters, or lack the set, aside;
    those that use a verifier get a scripted one)."""
    strategies = [s for cls in BUILTINS if (s := _runnable(cls, prompts)) is not None]
    builders = [b for s in strategies for b in type(s).step_builders if b.build is not None]
    seen: set[str] = set()
    for strategy in strategies:
        engine = MockEngine(lambda request: "so \\boxed{4}")
        verifier = ScriptedVerifier(lambda text: 0.5)
        result = asyncio.run(
            solve(strategy, "2+2?", engine, RunSettings(prompts=prompts, verifier=verifier))
        )
        for step in TraceView(result.events).steps:
            mine = [b for b in builders if step.template in b.templates]
            if mine:
                assert step.kind in {b.trace_kind for b in mine}, (strategy.name, step.template)
                seen |= {b.kind for b in mine if b.trace_kind == step.kind}
    assert seen >= {"direct", "gsr_refine", "rc_reasoning", "rc_summary", "self_refine_refine"}


# -- optional prompt sets ----------------------------------------------------------------------
class DefaultOnly(Single):
    name: ClassVar[str] = "default_only"
    prompt_sets: ClassVar[tuple[PromptSet, ...]] = (
        PromptSet.of("default", Template("default_only_hint", "$problem!")),
    )


def test_a_strategy_without_a_set_registers_and_is_refused_for_it() -> None:
    registry = Registry([*BUILTINS, DefaultOnly])
    assert "default_only_hint" in get_prompt_set("default", registry).templates
    assert get_prompt_set("compact", registry) == get_prompt_set("compact", builtin_registry())
    with pytest.raises(InvalidRequestError) as info:
        DefaultOnly().check_prompt_set("compact")
    assert str(info.value) == (
        "strategy 'default_only' has no templates for prompt set 'compact' (it has: default)"
    )


# -- entry points ----------------------------------------------------------------------------
@pytest.fixture
def site(tmp_path: Path) -> Iterator[Path]:
    """A folder on ``sys.path`` for distributions, forgotten afterwards."""
    root = tmp_path / "site"
    root.mkdir()
    with installed(root):
        yield root


def test_an_entry_point_naming_a_class_adds_it(site: Path) -> None:
    assert "recheck" not in default_registry().names()
    write_distribution(site)
    registry = default_registry()
    assert "recheck" in registry.names() and "recheck" not in builtin_registry().names()
    assert registry.get("recheck").__module__ == PACKAGE
    result = asyncio.run(solve("recheck", "2+2?", MockEngine(lambda r: reply(r.prompt_text()))))
    assert result.solutions[0].answer == "4"


def test_an_entry_point_naming_a_module_adds_its_marked_classes(site: Path) -> None:
    write_distribution(site, {"pair": "ponder_marked"}, modules={"ponder_marked": MARKED})
    assert {"once", "twice"} <= set(default_registry().names())


@pytest.mark.parametrize(
    ("entry", "modules", "says"),
    [
        ("ponder_absent:Nope", {}, "failed to load: ModuleNotFoundError: No module named"),
        ("ponder_broken", {"ponder_broken": "raise RuntimeError('boom')"}, "RuntimeError: boom"),
        ("ponder_empty", {"ponder_empty": "X = 1"}, "which registers no strategy"),
        ("ponder_value:X", {"ponder_value": "X = 1"}, "neither a Strategy subclass nor a module"),
    ],
)
def test_a_bad_entry_point_is_an_error_naming_it_and_its_distribution(
    site: Path, entry: str, modules: dict[str, str], says: str
) -> None:
    write_distribution(site, {"bad": entry}, modules=modules, name="ponder-bad")
    with pytest.raises(ScaffoldLoadError) as info:
        default_registry()
    message = str(info.value)
    assert message.startswith(f"entry point 'bad' = '{entry}' (ponder.scaffolds)")
    assert "of distribution ponder-bad 0.1" in message and says in message


def test_an_entry_point_may_not_take_a_builtin_name(site: Path) -> None:
    source = "from typing import ClassVar\nfrom scaffolds.strategies import Single\n\n"
    source += "class Mine(Single):\n    name: ClassVar[str] = 'gsr'\n"
    write_distribution(site, {"gsr": "ponder_mine:Mine"}, modules={"ponder_mine": source})
    with pytest.raises(ValueError, match=r"'gsr' is taken by both scaffolds\.strategies\.gsr\.GSR"):
        default_registry()
