"""The compact spec grammar: parsing and printing specs, with no strategy in sight.

A spec names a strategy and its non-default parameters; a nested strategy is a nested
spec. :mod:`scaffolds.spec.build` builds strategies from the parsed form; this module only
reads and writes text, so the strategy base can print itself without importing
:mod:`scaffolds.spec` (which builds strategies): it sits below both.

Grammar of the compact form (whitespace is allowed between any two tokens)::

    spec  := NAME | NAME "(" [arg ("," arg)*] ")"
    arg   := KEY "=" value
    value := spec | INT | FLOAT | STRING | true | false | null

Strings take double or single quotes and backslash escapes (``\\n``, ``\\"``,
``\\u00e9``...). Errors are :class:`SpecError` (``param`` is the dotted path).

>>> parse_compact("gsr(n=4, solver=rc(steps=3))")
{'name': 'gsr', 'n': 4, 'solver': {'name': 'rc', 'steps': 3}}
>>> print(format_spec({"name": "rc", "note": 'say "hi"', "t": 0.5, "x": True}))
rc(note="say \\"hi\\"", t=0.5, x=true)
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol, runtime_checkable

from scaffolds.errors import SpecError

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
    >>> parse_compact("gsr(n=4")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    scaffolds.errors.SpecError: expected ',' or ')' (found end of input) at column 8...
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


@runtime_checkable
class _HasSpec(Protocol):
    """A strategy, as far as printing goes."""

    def to_spec(self) -> dict[str, Any]: ...


def _format_value(value: Any, path: str, level: int) -> str:
    if isinstance(value, _HasSpec):
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
