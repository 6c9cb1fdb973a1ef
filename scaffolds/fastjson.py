"""JSON for the hot paths (engine bodies, responses, SSE chunks): orjson when installed.

:func:`dumps` writes compact UTF-8 JSON, as ``json.dumps(obj, ensure_ascii=False,
separators=(",", ":"))`` does up to float formatting; non-string keys become strings, as
with ``json``. Where ``json`` would write ``NaN`` or ``Infinity`` (not JSON), orjson
writes ``null``. :func:`loads` also reads those non-standard tokens (some servers send
``-Infinity`` logprobs), falling back to ``json`` for a document orjson refuses.

>>> dumps({"a": [1, 2.5, "x"], 3: None})
b'{"a":[1,2.5,"x"],"3":null}'
>>> loads(b'{"x": 1}'), loads('{"lp": -Infinity}')
({'x': 1}, {'lp': -inf})
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["FAST", "dumps", "loads"]

_orjson: Any
try:
    import orjson

    _orjson = orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None

FAST = _orjson is not None
"""Whether orjson is in use."""


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON."""
    if _orjson is not None:
        data: bytes = _orjson.dumps(obj, option=_orjson.OPT_NON_STR_KEYS)
        return data
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def loads(data: bytes | str) -> Any:
    """Parse JSON; a ValueError when it is not JSON."""
    if _orjson is not None:
        try:
            return _orjson.loads(data)
        except ValueError:
            pass  # NaN/Infinity tokens, or not JSON at all: json decides
    return json.loads(data)
