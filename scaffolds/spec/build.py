"""Scaffold specs: the compact string form, the JSON form, and building strategies.

The names a spec may use come from a :class:`~scaffolds.spec.registry.Registry`
(:mod:`scaffolds.spec.registry`); the compact form is read and written by
:mod:`scaffolds.spec_grammar`.

A spec names a strategy and its non-default parameters; a nested strategy is a nested
spec, so both forms describe the same tree::

    gsr(n=4, solver=rc(steps=3))
    {"name": "gsr", "n": 4, "solver": {"name": "rc", "steps": 3}}

Grammar of the compact form (whitespace is allowed between any two tokens)::

    spec  := NAME | NAME "(" [arg ("," arg)*] ")"
    arg   := KEY "=" value
    value := spec | INT | FLOAT | STRING | true | false | null

Strings take double or single quotes and backslash escapes (``\\n``, ``\\"``,
``\\u00e9``...). Everything here fails with :class:`SpecError` (``param`` is the dotted
path of the bad part), or :class:`FanOutError` when a spec asks for too much.

>>> from scaffolds.spec_grammar import format_spec, parse_compact
>>> parse_compact("gsr(n=4, solver=rc(steps=3))")
{'name': 'gsr', 'n': 4, 'solver': {'name': 'rc', 'steps': 3}}
>>> print(format_spec({"name": "rc", "note": 'say "hi"', "t": 0.5, "x": True}))
rc(note="say \\"hi\\"", t=0.5, x=true)
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Union, get_args, get_origin

from pydantic import ValidationError

from scaffolds.errors import FanOutError, SpecError
from scaffolds.spec.registry import (
    Registry,
    default_registry,
)
from scaffolds.spec_grammar import (
    _BOUNDS,
    _EXPECTED,
    _show,
    format_spec,
    parse_spec,
)
from scaffolds.strategies.base import FieldValueError, Strategy

__all__ = ["SpecLimits", "build_strategy", "check_limits", "check_runs", "spec_of", "spec_string"]


# -- building --------------------------------------------------------------------------------
@dataclass(frozen=True)
class SpecLimits:
    """Caps on what one spec may ask for: engine calls and generated sequences per solve,
    and nesting depth."""

    max_calls: int = 256
    max_depth: int = 4
    max_samples: int = 4096


def _members(annotation: Any) -> list[Any]:
    """The types a field accepts, None aside: ``int | None`` -> ``[int]``."""
    if get_origin(annotation) in (Union, types.UnionType):
        return [arg for arg in get_args(annotation) if arg is not type(None)]
    return [annotation]


def _field_error(err: Any, path: str, label: str) -> SpecError:
    """One pydantic error as a SpecError: ``label.field: constraint (got value)``."""
    ctx = err.get("ctx") or {}
    named = ctx.get("error")
    if isinstance(named, FieldValueError):  # a cross-field check naming its field
        err = {**err, "loc": (*err["loc"], named.field), "input": named.value}
    loc = ".".join(str(part) for part in err["loc"])
    where = f"{label}.{loc}" if loc else label
    param = ".".join(part for part in (path, loc) if part) or "scaffold"
    kind = err["type"]
    prefix = kind.partition("_")[0]
    if kind in _BOUNDS:
        text = f"must be {_BOUNDS[kind]} {next(iter(ctx.values()))}"
    elif prefix in ("int", "float", "bool"):
        text = _EXPECTED[{"int": int, "float": float, "bool": bool}[prefix]]
    elif kind == "string_type":
        text = "expected a string"
    elif kind == "literal_error":
        text = f"must be {ctx.get('expected')}"
    elif kind == "model_type":
        wanted = ctx.get("class_name")
        text = (
            f"expected a {wanted} scaffold" if wanted != "Strategy" else "expected a scaffold spec"
        )
    elif kind == "missing":
        return SpecError(f"{where}: is required", param=param)
    elif kind in ("value_error", "assertion_error") and "error" in ctx:
        text = str(ctx["error"])
    else:
        text = str(err["msg"])[:1].lower() + str(err["msg"])[1:]
    return SpecError(f"{where}: {text} (got {_show(err['input'])})", param=param)


def _build(spec: Any, registry: Registry, limits: SpecLimits, path: str, level: int) -> Strategy:
    if isinstance(spec, str):
        spec = parse_spec(spec)
    if not isinstance(spec, Mapping):
        where = path or "scaffold"
        raise SpecError(f"{where}: expected a scaffold spec (got {_show(spec)})", param=where)
    name, name_path = spec.get("name"), f"{path}.name" if path else "name"
    if not isinstance(name, str):
        got = "it is missing" if name is None else f"got {_show(name)}"
        raise SpecError(f"{name_path}: a strategy name is required ({got})", param=name_path)
    cls = registry.get(name, name_path)
    if level > limits.max_depth:
        problem = f"nests more than {limits.max_depth} strategies deep"
        raise FanOutError(f"scaffold {problem}", param="scaffold")
    label, fields, args = path or name, cls.model_fields, dict[str, Any]()
    for key, value in spec.items():
        where = f"{path}.{key}" if path else str(key)
        if key == "name":
            continue
        if key not in fields:
            owner = f"{path} ({name})" if path else name
            known = ", ".join(fields) or "none"
            raise SpecError(f"{owner}: unknown parameter {key!r} (known: {known})", param=where)
        members = _members(fields[key].annotation)
        nested = tuple(t for t in members if isinstance(t, type) and issubclass(t, Strategy))
        if nested and value is not None and not isinstance(value, Strategy):
            value = _build(value, registry, limits, where, level + 1)
        elif len(members) == 1 and members[0] in _EXPECTED and value is not None:
            if (kind := members[0]) is bool or isinstance(value, bool):
                fits = isinstance(value, bool) and kind is bool
            else:
                fits = isinstance(value, int if kind is int else (int, float))
            if not fits:
                raise SpecError(
                    f"{label}.{key}: {_EXPECTED[kind]} (got {_show(value)})", param=where
                )
        args[key] = value
    try:
        return cls.model_validate(args)
    except ValidationError as err:
        raise _field_error(err.errors()[0], path, label) from None


def check_limits(strategy: Strategy, limits: SpecLimits) -> None:
    """Raise :class:`FanOutError` when ``strategy`` nests or fans out past ``limits``."""
    depth, cap = strategy.depth(), limits.max_depth
    if depth > cap:
        problem = f"nests {depth} strategies deep, over the limit of {cap}"
        raise FanOutError(f"scaffold {_show(strategy)} {problem}", param="scaffold")
    calls, cap = strategy.max_calls(), limits.max_calls
    if calls > cap:
        problem = f"may make up to {calls} engine calls per solve, over the cap of {cap}"
        raise FanOutError(f"scaffold {_show(strategy)} {problem}", param="scaffold")
    samples, cap = strategy.max_samples(), limits.max_samples
    if samples > cap:
        problem = f"may generate up to {samples} sequences per solve, over the cap of {cap}"
        raise FanOutError(f"scaffold {_show(strategy)} {problem}", param="scaffold")


def check_runs(strategy: Strategy, n: int, limits: SpecLimits) -> None:
    """Raise :class:`FanOutError` (``param="n"``) when ``n`` runs of ``strategy`` may make
    more engine calls or generate more sequences than ``limits`` allow.

    >>> vote16 = build_strategy("majority(k=16)", default_registry())
    >>> try:
    ...     check_runs(vote16, 200, SpecLimits(max_calls=256, max_samples=3000))
    ... except FanOutError as err:
    ...     print(err.param, str(err).split(", ")[0])
    n n=200 runs of majority(k=16) may generate up to 3200 sequences
    """
    batched = strategy.batches_samples
    bounds = (
        (
            "make up to {} engine calls",
            strategy.max_calls_many(n) if batched else n * strategy.max_calls(),
            limits.max_calls,
        ),
        (
            "generate up to {} sequences",
            strategy.max_samples_many(n) if batched else n * strategy.max_samples(),
            limits.max_samples,
        ),
    )
    for what, bound, cap in bounds:
        if bound > cap:
            raise FanOutError(
                f"n={n} runs of {_show(strategy)} may {what.format(bound)}, over the cap of {cap}",
                param="n",
            )


def build_strategy(
    spec: str | Mapping[str, Any] | Strategy,
    registry: Registry | None = None,
    limits: SpecLimits | None = None,
) -> Strategy:
    """A validated strategy from ``spec`` (either form, or a ready Strategy), within limits.

    A nested strategy may be given as a JSON object or as a compact string.

    >>> build_strategy("gsr(n=4)", Registry())
    Traceback (most recent call last):
    scaffolds.errors.SpecError: unknown strategy 'gsr' (known: none)
    """
    registry = registry if registry is not None else default_registry()
    limits = limits or SpecLimits()
    strategy = spec if isinstance(spec, Strategy) else _build(spec, registry, limits, "", 1)
    check_limits(strategy, limits)
    return strategy


def spec_of(strategy: Strategy) -> dict[str, Any]:
    """The JSON form of ``strategy``, with its non-default parameters only."""
    return strategy.to_spec()


def spec_string(strategy: Strategy) -> str:
    """The compact form of ``strategy``; :func:`build_strategy` reverses it."""
    return format_spec(spec_of(strategy))
