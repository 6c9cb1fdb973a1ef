"""Scaffold specs: the compact string form, the JSON form, and building strategies.

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

>>> parse_compact("gsr(n=4, solver=rc(steps=3))")
{'name': 'gsr', 'n': 4, 'solver': {'name': 'rc', 'steps': 3}}
>>> print(format_spec({"name": "rc", "note": 'say "hi"', "t": 0.5, "x": True}))
rc(note="say \\"hi\\"", t=0.5, x=true)
"""

from __future__ import annotations

import difflib
import importlib
import json
import math
import re
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Union, get_args, get_origin

from pydantic import ValidationError

from scaffolds.errors import FanOutError, SpecError
from scaffolds.strategies.base import Strategy

MAX_SPEC_CHARS = 4096
"""The longest spec text accepted, in either form."""
MAX_NESTING = 32
"""The deepest nesting the parser accepts (building applies ``SpecLimits.max_depth``)."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOKEN = re.compile(
    r"""\s*(?:
      (?P<name>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<number>-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)(?![\w.])
    | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    | (?P<punct>[(),=])
    | (?P<end>\Z))""",
    re.VERBOSE | re.DOTALL,
)
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.DOTALL)
_ESCAPES = dict(zip("\"'\\/nrtbf0", "\"'\\/\n\r\t\b\f\0", strict=True))
_LITERALS: dict[str, Any] = {"true": True, "false": False, "null": None}
_EXPECTED = {int: "expected an integer", float: "expected a number", bool: "expected true or false"}
_BOUNDS = {
    "greater_than_equal": ">=",
    "greater_than": ">",
    "less_than_equal": "<=",
    "less_than": "<",
}
_BUILTINS = (  # module:class under scaffolds.strategies, imported by default_registry()
    "single:Single majority:Majority best_of_n:BestOfN self_refine:SelfRefine rc:RC "
    "abstraction:Abstraction gsr:GSR"
)


# -- the compact form ------------------------------------------------------------------------
class _Token(NamedTuple):
    kind: str  # "name", "number", "string", "end", or the punctuation character itself
    value: Any
    pos: int
    raw: str


def _syntax_error(text: str, pos: int, problem: str) -> SpecError:
    shown = text if len(text) <= 80 else text[:77] + "..."
    return SpecError(f"{problem} at column {pos + 1} in {shown!r}", param="scaffold")


def _unquote(text: str, pos: int, raw: str) -> str:
    def one(m: re.Match[str]) -> str:
        esc = m.group(1)
        if len(esc) == 5:
            return chr(int(esc[1:], 16))
        if esc not in _ESCAPES:
            raise _syntax_error(text, pos + 1 + m.start(), f"invalid escape '\\{esc}'")
        return _ESCAPES[esc]

    return _ESCAPE.sub(one, raw[1:-1])


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    i = 0
    while m := _TOKEN.match(text, i):
        kind = m.lastgroup or "end"
        raw, pos = m.group(kind), m.start(kind)
        value: Any = raw
        if kind == "number":
            value = int(raw) if raw.lstrip("-").isdigit() else float(raw)
            if not math.isfinite(value):
                raise _syntax_error(text, pos, f"number {raw} is out of range")
        elif kind == "string":
            value = _unquote(text, pos, raw)
        tokens.append(_Token(raw if kind == "punct" else kind, value, pos, raw))
        if kind == "end":
            return tokens
        i = m.end()
    i += len(text[i:]) - len(text[i:].lstrip())  # the character no token can start with
    if text[i] in "\"'":
        raise _syntax_error(text, i, "unterminated string starting")
    word = re.match(r"[-+.\w]+", text[i:])
    if text[i] in "-.0123456789" and word:
        raise _syntax_error(text, i, f"invalid number {word.group()[:20]!r}")
    expected = "expected a name, number, string, or one of ( ) , ="
    raise _syntax_error(text, i, f"unexpected character {text[i]!r} ({expected})")


class _Parser:
    """Recursive descent over the tokens; ``level`` counts nesting to bound the recursion."""

    def __init__(self, text: str):
        self.text, self.tokens, self.at = text, _tokenize(text), 0

    def take(self, kinds: tuple[str, ...], expected: str) -> _Token:
        tok = self.tokens[self.at]
        if tok.kind not in kinds:
            raise self.fail(tok, expected)
        self.at += 1
        return tok

    def fail(self, tok: _Token, expected: str) -> SpecError:
        found = "end of input" if tok.kind == "end" else repr(tok.raw[:20])
        return _syntax_error(self.text, tok.pos, f"expected {expected} (found {found})")

    def spec(self, level: int) -> dict[str, Any]:
        head = self.take(("name",), "a strategy name")
        if head.value in _LITERALS:
            raise self.fail(head, "a strategy name")
        if level > MAX_NESTING:
            raise _syntax_error(self.text, head.pos, f"specs nest more than {MAX_NESTING} deep")
        spec: dict[str, Any] = {"name": head.value}
        if self.tokens[self.at].kind != "(":
            return spec
        self.at += 1
        if self.tokens[self.at].kind == ")":
            self.at += 1
            return spec
        separator = ","
        while separator == ",":
            key = self.take(("name",), "a parameter name")
            if key.value in spec:
                what = "reserved" if key.value == "name" else "duplicate"
                raise _syntax_error(self.text, key.pos, f"{what} parameter {key.value!r}")
            self.take(("=",), f"'=' after {key.value!r}")
            spec[key.value] = self.value(level)
            separator = self.take((",", ")"), "',' or ')'").kind
        return spec

    def value(self, level: int) -> Any:
        expected = "a value (a spec, number, string, true, false or null)"
        tok = self.take(("name", "number", "string"), expected)
        if tok.kind != "name":
            return tok.value
        if tok.value in _LITERALS:
            return _LITERALS[tok.value]
        self.at -= 1
        return self.spec(level + 1)


def _check_length(text: str) -> None:
    if len(text) > MAX_SPEC_CHARS:
        problem = f"{len(text)} characters; the limit is {MAX_SPEC_CHARS}"
        raise SpecError(f"scaffold spec is too long ({problem})", param="scaffold")


def parse_compact(text: str) -> dict[str, Any]:
    """Parse a compact spec into its JSON form.

    >>> parse_compact(" best_of_n ( n = -2 , judge='it\\\\'s', t = 1e3 ) ")
    {'name': 'best_of_n', 'n': -2, 'judge': "it's", 't': 1000.0}
    >>> parse_compact("gsr(n=4")
    Traceback (most recent call last):
    scaffolds.errors.SpecError: expected ',' or ')' (found end of input) at column 8 in 'gsr(n=4'
    """
    if not isinstance(text, str):
        raise SpecError(f"a scaffold spec must be a string (got {_show(text)})", param="scaffold")
    _check_length(text)
    if not text.strip():
        raise SpecError("scaffold spec is empty (expected a strategy name)", param="scaffold")
    parser = _Parser(text)
    spec = parser.spec(1)
    parser.take(("end",), "end of spec")
    return spec


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if dupes := [key for i, key in enumerate(keys) if key in keys[:i]]:
        raise SpecError(f"duplicate parameter {dupes[0]!r} in JSON scaffold spec", param=dupes[0])
    return dict(pairs)


def _no_constant(constant: str) -> Any:
    raise SpecError(f"{constant} is not allowed in a scaffold spec", param="scaffold")


def parse_spec(text: str) -> dict[str, Any]:
    """Parse either form: JSON when ``text`` starts with ``{``, else the compact form.

    >>> parse_spec('{"name": "majority", "k": 5}') == parse_spec("majority(k=5)")
    True
    """
    if not isinstance(text, str) or not text.lstrip().startswith("{"):
        return parse_compact(text)
    _check_length(text)
    try:
        spec = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except json.JSONDecodeError as err:
        problem = f"{err.msg} at column {err.colno}"
        raise SpecError(f"invalid JSON scaffold spec: {problem}", param="scaffold") from None
    except RecursionError:
        raise SpecError("JSON scaffold spec nests too deeply", param="scaffold") from None
    if not isinstance(spec, dict):
        raise SpecError("a JSON scaffold spec must be an object", param="scaffold")
    return spec


# -- formatting ------------------------------------------------------------------------------
def _quote(text: str) -> str:
    def one(m: re.Match[str]) -> str:
        ch = m.group()
        return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(ch, f"\\u{ord(ch):04x}")

    return '"' + re.sub(r"[\x00-\x1f\x7f]", one, re.sub(r'(["\\])', r"\\\1", text)) + '"'


def _format_value(value: Any, path: str, level: int) -> str:
    if isinstance(value, Strategy):
        value = value.to_spec()
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float) and math.isfinite(value):
        return repr(float(value))
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, Mapping):
        return _format(value, path, level + 1)
    raise SpecError(f"{path}: {value!r} cannot be written in a compact spec", param=path)


def _format(spec: Mapping[str, Any], path: str, level: int) -> str:
    name, where = spec.get("name"), f"{path}.name" if path else "name"
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name in _LITERALS:
        raise SpecError(f"{where}: {name!r} is not a strategy name", param=where)
    if level > MAX_NESTING:
        raise SpecError(f"specs nest more than {MAX_NESTING} deep", param=path)
    args = []
    for key, value in spec.items():
        where = f"{path}.{key}" if path else str(key)
        if not isinstance(key, str) or not _NAME.fullmatch(key):
            raise SpecError(f"{key!r} is not a valid parameter name", param=where)
        if key != "name":
            args.append(f"{key}={_format_value(value, where, level)}")
    return f"{name}({', '.join(args)})" if args else name


def format_spec(spec: Mapping[str, Any]) -> str:
    """Write a JSON-form spec in the compact form; :func:`parse_compact` reverses it.

    >>> format_spec({"name": "gsr", "n": 4, "solver": {"name": "rc", "steps": 3}})
    'gsr(n=4, solver=rc(steps=3))'
    """
    return _format(spec, "", 1)


def _show(value: Any) -> str:
    """``value`` as a spec spells it (``"four"``, ``true``, ``rc(steps=3)``), for messages."""
    try:
        shown = _format_value(value, "", 1)
    except SpecError:
        shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


# -- the registry ----------------------------------------------------------------------------
class StrategyInfo(NamedTuple):
    """For docs and ``/v1/models``; ``params`` maps each parameter to its default
    (in JSON form; None for a required parameter)."""

    name: str
    summary: str
    params: dict[str, Any]


class Registry:
    """Maps spec names to Strategy classes.

    >>> Registry().get("gsr", "solver.name")
    Traceback (most recent call last):
    scaffolds.errors.SpecError: unknown strategy 'gsr' at solver (known: none)
    """

    def __init__(self, strategies: Iterable[type[Strategy]] = ()):
        self._classes: dict[str, type[Strategy]] = {}
        for cls in strategies:
            self.register(cls)

    def register(self, cls: type[Strategy]) -> type[Strategy]:
        """Add ``cls`` under ``cls.name``; returns ``cls``, so it also works as a decorator."""
        name = getattr(cls, "name", None)
        if not (isinstance(cls, type) and issubclass(cls, Strategy)):
            raise TypeError(f"{cls!r} is not a Strategy subclass")
        if not isinstance(name, str) or not _NAME.fullmatch(name) or name in _LITERALS:
            raise ValueError(f"{cls.__name__} needs a valid spec name (got {name!r})")
        if self._classes.setdefault(name, cls) is not cls:
            raise ValueError(f"strategy name {name!r} is already taken")
        return cls

    def get(self, name: str, path: str = "name") -> type[Strategy]:
        """The class named ``name``; ``path`` is the dotted path to blame if there is none."""
        if name in self._classes:
            return self._classes[name]
        near = difflib.get_close_matches(name, self._classes, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        where = f" at {path.removesuffix('.name')}" if path != "name" else ""
        known = ", ".join(self.names()) or "none"
        raise SpecError(f"unknown strategy {name!r}{where}{hint} (known: {known})", param=path)

    def names(self) -> list[str]:
        return sorted(self._classes)

    def describe(self) -> list[StrategyInfo]:
        out = []
        for name in self.names():
            cls, params = self._classes[name], dict[str, Any]()
            for key, info in cls.model_fields.items():
                required = info.is_required()
                default = None if required else info.get_default(call_default_factory=True)
                params[key] = default.to_spec() if isinstance(default, Strategy) else default
            summary = cls.summary or (cls.__doc__ or "").strip().partition("\n")[0]
            out.append(StrategyInfo(name, summary, params))
        return out


def default_registry() -> Registry:
    """A new registry of the built-in strategies, imported on this first use."""
    pairs = (item.split(":") for item in _BUILTINS.split())
    modules = ((importlib.import_module(f"scaffolds.strategies.{m}"), c) for m, c in pairs)
    return Registry(getattr(module, cls) for module, cls in modules)


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
    loc = ".".join(str(part) for part in err["loc"])
    where = f"{label}.{loc}" if loc else label
    param = ".".join(part for part in (path, loc) if part) or "scaffold"
    kind, ctx = err["type"], err.get("ctx") or {}
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
        ("make up to {} engine calls",
         strategy.max_calls_many(n) if batched else n * strategy.max_calls(), limits.max_calls),
        ("generate up to {} sequences",
         strategy.max_samples_many(n) if batched else n * strategy.max_samples(),
         limits.max_samples),
    )  # fmt: skip
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
