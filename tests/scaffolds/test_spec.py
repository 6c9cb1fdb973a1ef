"""Tests for scaffolds.spec.build: the compact/JSON spec forms, the registry and building."""

from __future__ import annotations

import contextlib
import doctest
import json
import re
from typing import Any, ClassVar, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import Field

from scaffolds.errors import FanOutError, SpecError
from scaffolds.spec import build as spec_module
from scaffolds.spec.build import SpecLimits, build_strategy, spec_of, spec_string
from scaffolds.spec.registry import Registry, builtin_registry, default_registry
from scaffolds.spec_grammar import (
    MAX_NESTING,
    MAX_SPEC_CHARS,
    format_spec,
    parse_compact,
    parse_spec,
)
from scaffolds.strategies import BUILTINS
from scaffolds.strategies.base import Strategy


# -- small strategies of our own ------------------------------------------------------------
class Leaf(Strategy):
    name: ClassVar[str] = "leaf"
    summary: ClassVar[str] = "One call."

    temperature: float = 0.7
    label: str = "x"
    verbose: bool = False
    mode: Literal["a", "b"] = "a"

    def max_calls(self) -> int:
        return 1


class Wrap(Strategy):
    """Runs its solver n times."""

    name: ClassVar[str] = "wrap"

    n: int = Field(default=2, ge=1, le=64)
    solver: Strategy = Leaf()

    def max_calls(self) -> int:
        return self.n * self.solver.max_calls()


class Pair(Strategy):
    name: ClassVar[str] = "pair"

    first: Strategy = Leaf()
    second: Strategy | None = None
    limit: int | None = None

    def max_calls(self) -> int:
        return self.first.max_calls() + (self.second.max_calls() if self.second else 0)


class OnlyLeaf(Strategy):
    name: ClassVar[str] = "only_leaf"

    inner_leaf: Leaf = Leaf()

    def max_calls(self) -> int:
        return 1


REGISTRY = Registry([Leaf, Wrap, Pair, OnlyLeaf])
ROOMY = SpecLimits(max_calls=10**40, max_depth=MAX_NESTING, max_samples=10**40)


def build(spec: Any, limits: SpecLimits | None = None) -> Strategy:
    return build_strategy(spec, REGISTRY, limits)


def typed(value: Any) -> str:
    """A comparison key that tells 1, 1.0 and true apart (and keeps key order)."""
    return json.dumps(value)


def test_doctests_pass() -> None:
    assert doctest.testmod(spec_module).failed == 0


# -- parsing --------------------------------------------------------------------------------
def test_parses_every_value_kind() -> None:
    text = (
        "leaf(a=1, b=-2, c=1.5, d=-0.25, e=1e3, f=2.5E-3, g=.5, h=\"s\", i='t', "
        "j=true, k=false, l=null, m=wrap, n=007)"
    )
    expected = {"name": "leaf", "a": 1, "b": -2, "c": 1.5, "d": -0.25, "e": 1000.0}
    expected |= {"f": 0.0025, "g": 0.5, "h": "s", "i": "t", "j": True, "k": False, "l": None}
    expected |= {"m": {"name": "wrap"}, "n": 7}
    assert typed(parse_compact(text)) == typed(expected)


def test_whitespace_anywhere_between_tokens() -> None:
    text = " \n wrap \t( n = 3 ,\n solver = leaf ( ) ) \n"
    assert parse_compact(text) == {"name": "wrap", "n": 3, "solver": {"name": "leaf"}}


def test_nested_specs_and_empty_parens() -> None:
    assert parse_compact("pair(first=wrap(solver=wrap(n=3)), second=leaf())") == {
        "name": "pair",
        "first": {"name": "wrap", "solver": {"name": "wrap", "n": 3}},
        "second": {"name": "leaf"},
    }


def test_string_escapes() -> None:
    text = r"""leaf(a="q\"b\\s\n\t\u00e9/\/", b='it\'s', c="it's", d='say "hi"')"""
    assert parse_compact(text) == {
        "name": "leaf",
        "a": 'q"b\\s\n\té//',
        "b": "it's",
        "c": "it's",
        "d": 'say "hi"',
    }


def test_json_form() -> None:
    text = '  {"name": "wrap", "n": 3, "solver": {"name": "leaf", "label": "é"}}'
    assert parse_spec(text) == parse_compact('wrap(n=3, solver=leaf(label="é"))')
    assert parse_spec("wrap(n=3)") == {"name": "wrap", "n": 3}


# -- formatting and round trips -------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "text"),
    [
        ({"name": "single"}, "single"),
        ({"name": "wrap", "n": 4, "solver": {"name": "leaf"}}, "wrap(n=4, solver=leaf)"),
        ({"name": "leaf", "t": 1e-05, "u": 0.1, "v": -0.0}, "leaf(t=1e-05, u=0.1, v=-0.0)"),
        ({"name": "leaf", "w": 1e16, "x": -3}, "leaf(w=1e+16, x=-3)"),
        ({"name": "leaf", "a": True, "b": False, "c": None}, "leaf(a=true, b=false, c=null)"),
        ({"name": "leaf", "s": 'a"b\\c\nd\x01'}, r'leaf(s="a\"b\\c\nd\u0001")'),
    ],
)
def test_format_spec(spec: dict[str, Any], text: str) -> None:
    assert format_spec(spec) == text
    assert typed(parse_compact(text)) == typed(spec)


def test_format_accepts_strategy_values() -> None:
    assert format_spec({"name": "wrap", "solver": Wrap(n=3)}) == "wrap(solver=wrap(n=3))"


@pytest.mark.parametrize(
    ("spec", "param"),
    [
        ({"name": "leaf", "t": float("inf")}, "t"),
        ({"name": "leaf", "xs": [1, 2]}, "xs"),
        ({"name": "wrap", "solver": {"n": 3}}, "solver.name"),
        ({"name": "true"}, "name"),
        ({"name": "leaf", "bad key": 1}, "bad key"),
    ],
)
def test_format_rejects_what_it_cannot_write(spec: dict[str, Any], param: str) -> None:
    with pytest.raises(SpecError) as info:
        format_spec(spec)
    assert info.value.param == param


def test_strategy_round_trips_through_both_forms() -> None:
    strategy = Wrap(n=3, solver=Pair(second=Leaf(label='q"\n', temperature=1e-7, verbose=True)))
    text = spec_string(strategy)
    assert text == str(strategy)
    leaf = 'leaf(temperature=1e-07, label="q\\"\\n", verbose=true)'
    assert text == f"wrap(n=3, solver=pair(second={leaf}))"
    assert build(text) == strategy
    assert build(spec_of(strategy)) == strategy
    assert build(json.dumps(spec_of(strategy))) == strategy
    assert spec_string(Wrap()) == "wrap"


def test_build_takes_ints_for_floats_and_nested_compact_strings() -> None:
    leaf = build("leaf(temperature=1)")
    assert leaf == Leaf(temperature=1.0)
    assert isinstance(leaf, Leaf) and type(leaf.temperature) is float
    assert build({"name": "wrap", "solver": "wrap(n=3)"}) == Wrap(solver=Wrap(n=3))
    assert build({"name": "wrap", "solver": '{"name": "wrap"}'}) == Wrap(solver=Wrap())
    assert build("pair(limit=null, second=null)") == Pair()
    ready = Wrap(n=5)
    assert build(ready) is ready


# -- syntax errors --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "scaffold spec is empty"),
        ("  \n ", "scaffold spec is empty"),
        ("wrap(n=4", "expected ',' or ')' (found end of input) at column 9 in 'wrap(n=4'"),
        ("wrap(n=4))", "expected end of spec (found ')') at column 10"),
        ("wrap(n=4) leaf", "expected end of spec (found 'leaf') at column 11"),
        ('leaf(label="abc', "unterminated string starting at column 12"),
        ("leaf(label='abc\\'", "unterminated string starting at column 12"),
        ("wrap(n=)", "expected a value (a spec, number, string, true, false or null) (found ')')"),
        ("wrap(n 4)", "expected '=' after 'n' (found '4') at column 8"),
        ("wrap(=4)", "expected a parameter name (found '=') at column 6"),
        ("wrap(n=4,)", "expected a parameter name (found ')') at column 10"),
        ("wrap(n=1, n=2)", "duplicate parameter 'n' at column 11"),
        ("wrap(name=3)", "reserved parameter 'name' at column 6"),
        ("4", "expected a strategy name (found '4') at column 1"),
        ("true", "expected a strategy name (found 'true')"),
        ("(n=1)", "expected a strategy name (found '(')"),
        ("wrap(n=4x)", "invalid number '4x' at column 8"),
        ("wrap(n=1.2.3)", "invalid number '1.2.3' at column 8"),
        ("wrap(n=-)", "invalid number '-' at column 8"),
        ("wrap(n=@)", "unexpected character '@' (expected a name, number, string, or one of"),
        ("leaf(a=" + "1" * 30 + "x)", "invalid number '" + "1" * 20 + "' at column 8"),
        ("wrap(n=@)", ") , =) at column 8 in 'wrap(n=@)'"),
        ('leaf(label="\\q")', "invalid escape '\\q' at column 13"),
        ('leaf(label="\\u12")', "invalid escape '\\u' at column 13"),
        ("leaf(t=1e999)", "number 1e999 is out of range at column 8"),
    ],
)
def test_syntax_errors_show_position_and_expectation(text: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_compact(text)
    assert message in str(info.value)
    assert info.value.param == "scaffold"
    assert not isinstance(info.value, FanOutError)


def test_too_long() -> None:
    text = 'leaf(label="' + "a" * MAX_SPEC_CHARS + '")'
    for parse in (parse_compact, parse_spec, build):
        with pytest.raises(SpecError, match=r"too long \(4110 characters; the limit is 4096\)"):
            parse(text)
    with pytest.raises(SpecError, match="too long"):
        parse_spec('{"name": "' + "a" * MAX_SPEC_CHARS + '"}')


def test_too_deep_is_an_error_not_a_crash() -> None:
    with pytest.raises(SpecError, match=f"specs nest more than {MAX_NESTING} deep"):
        parse_compact("wrap(solver=" * 40 + "leaf" + ")" * 40)
    deepest = "a(b=" * 800 + "c" + ")" * 800  # just under the length limit
    assert len(deepest) <= MAX_SPEC_CHARS
    with pytest.raises(SpecError, match="nest more than"):
        parse_compact(deepest)
    ok = "wrap(solver=" * (MAX_NESTING - 1) + "leaf" + ")" * (MAX_NESTING - 1)
    assert build(ok, ROOMY).depth() == MAX_NESTING
    with pytest.raises(SpecError, match="nests too deeply"):
        parse_spec('{"a": ' + "[" * 4000)


@pytest.mark.parametrize(
    ("text", "message", "param"),
    [
        ('{"name": "wrap", ', "invalid JSON scaffold spec: Expecting property name", "scaffold"),
        ('{"name": "wrap", "n": 1, "n": 2}', "duplicate parameter 'n'", "n"),
        ('{"name": "leaf", "temperature": NaN}', "NaN is not allowed", "scaffold"),
        ('{"name": "leaf"} x', "Extra data at column 18", "scaffold"),
    ],
)
def test_json_syntax_errors(text: str, message: str, param: str) -> None:
    with pytest.raises(SpecError) as info:
        build(text)
    assert message in str(info.value)
    assert info.value.param == param


# -- validation errors ----------------------------------------------------------------------
KNOWN = "(known: leaf, only_leaf, pair, wrap)"
T = "temperature"


@pytest.mark.parametrize(
    ("spec", "message", "param"),
    [
        ("wrapp", f"unknown strategy 'wrapp'; did you mean 'wrap'? {KNOWN}", "name"),
        ("wrap(solver=zzz)", f"unknown strategy 'zzz' at solver {KNOWN}", "solver.name"),
        ("wrap(foo=1)", "wrap: unknown parameter 'foo' (known: n, solver)", "foo"),
        ("pair(first=wrap(foo=1))", "first (wrap): unknown parameter 'foo'", "first.foo"),
        ('wrap(n="four")', 'wrap.n: expected an integer (got "four")', "n"),
        ('wrap(n="4")', 'wrap.n: expected an integer (got "4")', "n"),
        ("wrap(n=true)", "wrap.n: expected an integer (got true)", "n"),
        ("wrap(n=2.0)", "wrap.n: expected an integer (got 2.0)", "n"),
        ("wrap(n=null)", "wrap.n: expected an integer (got null)", "n"),
        ("leaf(temperature=false)", "leaf.temperature: expected a number (got false)", T),
        ('leaf(temperature="hot")', 'leaf.temperature: expected a number (got "hot")', T),
        ("leaf(verbose=1)", "leaf.verbose: expected true or false (got 1)", "verbose"),
        ("leaf(label=3)", "leaf.label: expected a string (got 3)", "label"),
        ('leaf(mode="c")', "leaf.mode: must be 'a' or 'b' (got \"c\")", "mode"),
        ("wrap(n=0)", "wrap.n: must be >= 1 (got 0)", "n"),
        ("wrap(n=65)", "wrap.n: must be <= 64 (got 65)", "n"),
        ("wrap(solver=wrap(n=0))", "solver.n: must be >= 1 (got 0)", "solver.n"),
        (
            "pair(second=wrap(solver=wrap(n=-1)))",
            "second.solver.n: must be >= 1",
            "second.solver.n",
        ),
        ("pair(limit=true)", "pair.limit: expected an integer (got true)", "limit"),
        ("wrap(solver=3)", "solver: expected a scaffold spec (got 3)", "solver"),
        ('wrap(solver="wrap(n=")', "expected a value", "scaffold"),
        ("wrap(solver=null)", "wrap.solver: expected a scaffold spec (got null)", "solver"),
        ("only_leaf(inner_leaf=wrap)", "expected a Leaf scaffold (got wrap)", "inner_leaf"),
        ({"n": 3}, "name: a strategy name is required (it is missing)", "name"),
        ({"name": 3}, "name: a strategy name is required (got 3)", "name"),
        ({"name": "wrap", "solver": {"n": 1}}, "solver.name: a strategy name is", "solver.name"),
        ({"name": "leaf", 3: 1}, "leaf: unknown parameter 3", "3"),
        (42, "scaffold: expected a scaffold spec (got 42)", "scaffold"),
        ('["wrap"]', "unexpected character '[' (expected a name", "scaffold"),
        ("{}", "name: a strategy name is required (it is missing)", "name"),
    ],
)
def test_validation_errors_name_the_path(spec: Any, message: str, param: str) -> None:
    with pytest.raises(SpecError) as info:
        build(spec)
    assert message in str(info.value)
    assert info.value.param == param
    assert not isinstance(info.value, FanOutError)


def test_fan_out_over_the_cap() -> None:
    with pytest.raises(FanOutError) as info:
        build("wrap(n=64, solver=wrap(n=64))")
    assert str(info.value) == (
        "scaffold wrap(n=64, solver=wrap(n=64)) may make up to 4096 engine calls per solve, "
        "over the cap of 256"
    )
    assert info.value.param == "scaffold"
    assert build("wrap(n=16, solver=wrap(n=16))").max_calls() == 256  # exactly at the cap
    assert build("wrap(n=64, solver=wrap(n=64))", SpecLimits(max_calls=4096)).max_calls() == 4096
    with pytest.raises(FanOutError, match="4096 engine calls"):
        build(Wrap(n=64, solver=Wrap(n=64)))  # ready strategies are checked too


def test_depth_over_the_limit() -> None:
    four = "wrap(solver=wrap(solver=wrap(solver=wrap)))"  # plus the default leaf: 5 deep
    with pytest.raises(FanOutError) as info:
        build(four)
    assert "nests 5 strategies deep, over the limit of 4" in str(info.value)
    assert info.value.param == "scaffold"
    assert build(four, SpecLimits(max_depth=5)).depth() == 5
    with pytest.raises(FanOutError, match="nests more than 4 strategies deep"):
        build("wrap(solver=" * 6 + "leaf" + ")" * 6)
    deep: dict[str, Any] = {"name": "leaf"}
    for _ in range(5000):  # a deep mapping is cut off early, not by a RecursionError
        deep = {"name": "wrap", "solver": deep}
    with pytest.raises(FanOutError):
        build(deep)


# -- the registry ---------------------------------------------------------------------------
def test_registry() -> None:
    registry = Registry()
    assert registry.register(Leaf) is Leaf
    registry.register(Leaf)  # the same class again is fine
    registry.register(Wrap)
    assert registry.names() == ["leaf", "wrap"]
    assert registry.get("wrap") is Wrap
    with pytest.raises(ValueError, match="already taken"):
        registry.register(type("Other", (Leaf,), {}))
    with pytest.raises(TypeError):
        registry.register(int)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="valid spec name"):
        registry.register(type("Bad", (Leaf,), {"name": "true"}))
    with pytest.raises(SpecError) as info:
        registry.get("lef", "solver.name")
    assert (
        str(info.value)
        == "unknown strategy 'lef' at solver; did you mean 'leaf'? (known: leaf, wrap)"
    )
    assert info.value.param == "solver.name"


def test_describe() -> None:
    info = {entry.name: entry for entry in REGISTRY.describe()}
    assert list(info) == ["leaf", "only_leaf", "pair", "wrap"]
    assert info["leaf"].summary == "One call."
    assert info["leaf"].params == {"temperature": 0.7, "label": "x", "verbose": False, "mode": "a"}
    name, summary, params = info["wrap"]
    assert (name, summary) == ("wrap", "Runs its solver n times.")
    assert params == {"n": 2, "solver": {"name": "leaf"}}
    assert info["pair"].params["second"] is None
    json.dumps([entry._asdict() for entry in REGISTRY.describe()])


# -- the built-in strategies ----------------------------------------------------------------
@pytest.fixture
def builtins() -> Registry:
    return default_registry()


def test_default_registry(builtins: Registry) -> None:
    assert builtin_registry().names() == sorted(cls.name for cls in BUILTINS)
    assert set(builtin_registry().names()) <= set(builtins.names())
    assert default_registry() is not builtins
    assert all(entry.summary for entry in builtins.describe())


def test_builtin_round_trip(builtins: Registry) -> None:
    strategy = build_strategy("gsr(n=3, solver=rc(steps=3))", builtins)
    assert type(strategy).__name__ == "GSR"
    assert build_strategy(spec_string(strategy)) == strategy
    assert build_strategy(spec_of(strategy)) == strategy
    with pytest.raises(SpecError) as info:
        build_strategy("gsr(n=0)")
    assert (str(info.value), info.value.param) == ("gsr.n: must be >= 1 (got 0)", "n")
    with pytest.raises(SpecError, match=re.escape(f"known: {', '.join(builtins.names())})")):
        build_strategy("gsrr")


@pytest.mark.parametrize(
    ("spec", "canonical", "calls", "samples"),
    [
        ("rsa", "rsa", 49, 64),
        ("rsa(n=8, k=4, rounds=2)", "rsa(n=8, rounds=2)", 17, 24),
        (
            "rsa(n=4, k=2, rounds=1, solver=rc(steps=2))",
            "rsa(n=4, k=2, rounds=1, solver=rc(steps=2))",
            13,
            16,
        ),
        ({"name": "rsa", "rounds": 0}, "rsa(rounds=0)", 1, 16),
        ("adaptive", "adaptive", 8, 32),
        (
            "adaptive(max_k=16, wave=5, confidence=0.9)",
            "adaptive(max_k=16, wave=5, confidence=0.9)",
            4,
            16,
        ),
        ("adaptive(max_k=4, solver=gsr(n=2))", "adaptive(max_k=4, solver=gsr(n=2))", 8, 12),
    ],
)
def test_rsa_and_adaptive_specs(
    builtins: Registry, spec: Any, canonical: str, calls: int, samples: int
) -> None:
    strategy = build_strategy(spec, builtins)
    assert spec_string(strategy) == canonical
    assert build_strategy(spec_of(strategy), builtins) == strategy
    assert (strategy.max_calls(), strategy.max_samples()) == (calls, samples)


@pytest.mark.parametrize(
    ("spec", "message", "param"),
    [
        ("rsa(n=2, k=3)", "rsa.k: must be at most n=2 (got 3)", "k"),
        ("rsa(rounds=-1)", "rsa.rounds: must be >= 0 (got -1)", "rounds"),
        ("adaptive(confidence=0)", "adaptive.confidence: must be > 0", "confidence"),
        ("adaptive(wave=2.5)", "adaptive.wave: expected an integer", "wave"),
    ],
)
def test_rsa_and_adaptive_spec_errors(spec: str, message: str, param: str) -> None:
    with pytest.raises(SpecError) as info:
        build_strategy(spec)
    assert str(info.value).startswith(message) and info.value.param == param


def test_rsa_over_the_fan_out_cap_is_refused() -> None:
    with pytest.raises(FanOutError, match="up to 513 engine calls"):
        build_strategy("rsa(n=64, rounds=8)")


# -- properties -----------------------------------------------------------------------------
FLOATS = st.floats(allow_nan=False, allow_infinity=False)
LEAVES = st.builds(
    Leaf,
    temperature=FLOATS,
    label=st.text(max_size=8),
    verbose=st.booleans(),
    mode=st.sampled_from(["a", "b"]),
)
TREES = st.recursive(
    LEAVES | st.builds(Wrap) | st.builds(Pair),
    lambda inner: (
        st.builds(Wrap, n=st.integers(1, 64), solver=inner)
        | st.builds(Pair, first=inner, second=st.none() | inner, limit=st.none() | st.integers())
    ),
    max_leaves=6,
)
IDENTS = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True)
NAMES = IDENTS.filter(lambda s: s not in ("true", "false", "null"))
SCALARS = st.none() | st.booleans() | st.integers() | FLOATS | st.text(max_size=10)
SPECS = st.recursive(
    st.builds(lambda name: {"name": name}, NAMES),
    lambda inner: st.builds(
        lambda name, args: {"name": name, **args},
        NAMES,
        st.dictionaries(IDENTS.filter(lambda s: s != "name"), SCALARS | inner, max_size=4),
    ),
    max_leaves=8,
)
SPEC_CHARS = "wrapleafsolvn(),=\"'\\ .-+0123456789etruxfsnl{}[]:"
FIELD_NAMES = ["name", "n", "solver", "first", "second", "limit", "label", "temperature", "x"]
JSONISH = st.recursive(
    SCALARS | st.sampled_from(["leaf", "wrap", "pair", "only_leaf", "nope", "wrap(n=3)"]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(FIELD_NAMES), inner)
    ),
    max_leaves=10,
)
FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(TREES)
def test_strategies_round_trip(strategy: Strategy) -> None:
    text = spec_string(strategy)
    assert typed(parse_compact(text)) == typed(spec_of(strategy))
    assert build(text, ROOMY) == strategy
    assert build(json.dumps(spec_of(strategy)), ROOMY) == strategy


@FAST
@given(SPECS)
def test_json_form_specs_round_trip(spec: dict[str, Any]) -> None:
    text = format_spec(spec)
    if len(text) <= MAX_SPEC_CHARS:
        assert typed(parse_compact(text)) == typed(spec)


def _only_spec_errors(spec: Any) -> None:
    for attempt in (parse_spec, build):
        with contextlib.suppress(SpecError):
            attempt(spec)


@FAST
@given(st.text(max_size=60) | st.text(alphabet=SPEC_CHARS, max_size=60))
def test_random_text_raises_only_spec_errors(text: str) -> None:
    _only_spec_errors(text)


@FAST
@given(TREES, st.data())
def test_mangled_specs_raise_only_spec_errors(strategy: Strategy, data: st.DataObject) -> None:
    text = spec_string(strategy)
    at = data.draw(st.integers(0, len(text)))
    cut = data.draw(st.integers(0, 3))
    inserted = data.draw(st.text(alphabet=SPEC_CHARS, max_size=4))
    _only_spec_errors(text[:at] + inserted + text[at + cut :])


@FAST
@given(JSONISH)
def test_random_json_values_raise_only_spec_errors(value: Any) -> None:
    with contextlib.suppress(SpecError):
        build(value)


@pytest.mark.parametrize(
    "text",
    ["1" * 4000 + "x", '"' + "a" * 4000, " " * 4000 + "@", "a(b=" + "1." * 2000, "a(" * 2000],
)
@pytest.mark.timeout(10)
def test_worst_case_inputs_are_rejected(text: str) -> None:
    # Bounded by pytest-timeout rather than a timing assertion: a regex or parser that
    # backtracks badly on these would hang for far longer than 10 s.
    with pytest.raises(SpecError):
        build(text)
