"""Who is asking: the client key a request was authenticated with, that key's limits, and
the table of every accepted key (read from the flags and from a keys file).

The auth middleware (:mod:`server.app.auth`) resolves the request's key to a
:class:`ClientKey` and leaves it on the request's state; everything below reads it from
there (:func:`server.routing.client_key_of`). With no keys configured, every request is
:data:`ANONYMOUS`: one tenant, no limits, as a server with auth off always behaved.

>>> ANONYMOUS.name, ANONYMOUS.tenant, ANONYMOUS.limits.max_concurrent_runs
('anonymous', 'anonymous', None)
>>> ClientKey(name="alice", tenant="team-a", limits=KeyLimits(requests_per_minute=60)).owner
'team-a'

A :class:`KeyTable` holds each key's SHA-256 digest, never the key, and compares a given
key against every digest in constant time:

>>> table = KeyTable.of_flat_keys(["sk-one", "sk-two"])
>>> table.lookup("sk-two")
ClientKey(name='key-2', tenant='key-2', limits=KeyLimits(...))
>>> table.lookup("sk-nope") is None
True
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

__all__ = [
    "ANONYMOUS",
    "ClientKey",
    "KeyEntry",
    "KeyLimits",
    "KeyTable",
    "hash_key",
    "key_entries_of",
    "load_keys_file",
    "new_key",
    "read_keys_document",
    "write_keys_document",
]


@dataclass(frozen=True)
class KeyLimits:
    """What one key may use; ``None`` is no limit.

    ``models`` and ``scaffolds`` are allow-lists (``None``: all). A token limit counts the
    tokens the key's runs generate, across each run's whole fan-out.
    """

    max_concurrent_runs: int | None = None
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    tokens_per_day: int | None = None
    models: tuple[str, ...] | None = None
    scaffolds: tuple[str, ...] | None = None
    max_fanout: int | None = None

    def allows_model(self, model_id: str, base: str) -> bool:
        """Whether ``models`` lets the key use the id ``model_id`` of the served model
        ``base``: the one rule for running it and for seeing it in ``/v1/models`` (any
        other id is the 404 of a model not served). A base model's name covers every id
        on it (its aliases and ``base+<spec>``); an alias's id, only itself.

        >>> limits = KeyLimits(models=("m", "n+g2"))
        >>> limits.allows_model("m+g2", "m"), limits.allows_model("n+g2", "n")
        (True, True)
        >>> limits.allows_model("n", "n"), KeyLimits().allows_model("n", "n")
        (False, True)
        """
        return self.models is None or model_id in self.models or base in self.models


@dataclass(frozen=True)
class ClientKey:
    """An authenticated client: its key's ``name`` (logs and metric labels: never the key),
    the ``tenant`` that owns what it stores, and its :class:`KeyLimits`."""

    name: str
    tenant: str
    limits: KeyLimits = field(default_factory=KeyLimits)

    @property
    def owner(self) -> str:
        """Whom a stored object belongs to: the tenant (keys of one tenant share them)."""
        return self.tenant


ANONYMOUS = ClientKey(name="anonymous", tenant="anonymous")
"""Every request's key when auth is off."""

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
"""A key's name and a tenant: short and plain (a metric label, a log field)."""
_DIGEST = re.compile(r"^[0-9a-f]{64}$")
_LIMITS = {f.name for f in fields(KeyLimits)}
_LISTS = {"models", "scaffolds"}


def hash_key(key: str) -> str:
    """The SHA-256 digest of a key, in hex: what a keys file and the key table keep.

    >>> hash_key("sk-one")[:16]
    '456f1612bd25c6c8'
    """
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    """A fresh random key (256 bits).

    >>> k = new_key(); k.startswith("sk-ponder-") and len(k) > 40
    True
    """
    return "sk-ponder-" + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class KeyEntry:
    """One accepted key: the SHA-256 digest of the key and whom it stands for."""

    digest: bytes
    key: ClientKey


@dataclass(frozen=True)
class KeyTable:
    """Every accepted key. Empty: auth is off. Swapped whole on a reload (never edited)."""

    entries: tuple[KeyEntry, ...] = ()

    @property
    def enabled(self) -> bool:
        return bool(self.entries)

    @classmethod
    def of_flat_keys(cls, keys: Iterable[str], *, first: int = 1) -> KeyTable:
        """Keys given bare (``--api-key``, env, a file of lines): each is named from its
        position, ``key-1``, ``key-2``..., and is a tenant of its own."""
        entries = []
        for index, key in enumerate(dict.fromkeys(k for k in keys if k), start=first):
            name = f"key-{index}"
            entries.append(KeyEntry(bytes.fromhex(hash_key(key)), ClientKey(name, name)))
        return cls(tuple(entries))

    def __add__(self, other: KeyTable) -> KeyTable:
        """Both tables' keys; a name or a key in both is an error.

        >>> (KeyTable.of_flat_keys(["a"]) + KeyTable.of_flat_keys(["a"], first=2))
        Traceback (most recent call last):
        ...
        ValueError: keys: key 'key-2' is the same key as 'key-1'
        """
        names: dict[str, str] = {}
        digests: dict[bytes, str] = {}
        for entry in (*self.entries, *other.entries):
            if entry.key.name in names:
                raise ValueError(f"keys: two keys are named {entry.key.name!r}")
            if entry.digest in digests:
                raise ValueError(
                    f"keys: key {entry.key.name!r} is the same key as {digests[entry.digest]!r}"
                )
            names[entry.key.name] = entry.key.name
            digests[entry.digest] = entry.key.name
        return KeyTable((*self.entries, *other.entries))

    def names(self) -> tuple[str, ...]:
        """Every key's name (the bounded set of metric labels, with ``anonymous``)."""
        return tuple(e.key.name for e in self.entries)

    def lookup(self, given: str) -> ClientKey | None:
        """The key ``given`` is, or None. Its digest is compared with every entry's, in
        constant time, whichever matches (or none)."""
        digest = hashlib.sha256(given.encode()).digest()
        found: ClientKey | None = None
        for entry in self.entries:
            matched = hmac.compare_digest(digest, entry.digest)
            found = entry.key if matched else found
        return found


# -- the keys file -------------------------------------------------------------------------


def read_keys_document(path: Path) -> dict[str, Any]:
    """The keys file as data: ``{"keys": [{name, tenant, key_sha256 | key, limits}, ...]}``
    (YAML, or TOML when its name ends in ``.toml``); a missing file is no keys."""
    if not path.exists():
        return {"keys": []}
    text = path.read_text()
    import yaml

    try:  # the parsers' messages quote the file's text, which may hold a key: not shown
        data: Any = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        mark = getattr(exc, "problem_mark", None)
        at = re.search(r"at line (\d+)", str(exc))  # tomllib's message names the line
        line = mark.line + 1 if mark is not None else (at.group(1) if at else None)
        kind = "TOML" if path.suffix == ".toml" else "YAML"
        where = f" (line {line})" if line else ""
        raise ValueError(f"keys file {str(path)!r}: not valid {kind}{where}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict) or not isinstance(data.get("keys", []), list):
        raise ValueError(f"keys file {str(path)!r}: expected a mapping with a 'keys' list")
    data.setdefault("keys", [])
    return data


def write_keys_document(path: Path, data: Mapping[str, Any]) -> None:
    """Write the keys file whole (YAML), atomically: a reader sees the old file or the new.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = Path(folder) / "keys.yaml"
    ...     write_keys_document(path, {"keys": [{"name": "a", "tenant": "t", "key": "sk-1"}]})
    ...     load_keys_file(path).lookup("sk-1").tenant
    't'
    """
    import os

    import yaml

    if path.suffix == ".toml":
        raise ValueError(f"keys file {str(path)!r}: the keys command writes YAML (.yaml)")
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    partial.write_text(yaml.safe_dump(dict(data), sort_keys=False))
    os.chmod(partial, 0o600)
    partial.replace(path)


def _limits_of(raw: Any, where: str) -> KeyLimits:
    if raw is None:
        return KeyLimits()
    if not isinstance(raw, dict):
        raise ValueError(f"{where}.limits: expected a mapping")
    unknown = sorted(set(raw) - _LIMITS)
    if unknown:
        raise ValueError(
            f"{where}.limits: unknown limit {unknown[0]!r} (known: {', '.join(sorted(_LIMITS))})"
        )
    values: dict[str, Any] = {}
    for name, value in raw.items():
        if value is None:
            continue
        if name in _LISTS:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"{where}.limits.{name}: expected a list of names")
            values[name] = tuple(value)
        elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{where}.limits.{name}: expected a whole number >= 1")
        else:
            values[name] = value
    return KeyLimits(**values)


def key_entries_of(data: Mapping[str, Any], source: str = "keys file") -> KeyTable:
    """The key table a keys document describes; an error names the entry and field.

    >>> key_entries_of({"keys": [{"name": "bob", "tenant": "t", "key": "k",
    ...                           "limits": {"colour": 1}}]})
    Traceback (most recent call last):
    ...
    ValueError: keys file: keys[0].limits: unknown limit 'colour' (known: ...)
    """
    table = KeyTable()
    for index, raw in enumerate(data.get("keys", [])):
        where = f"{source}: keys[{index}]"
        if not isinstance(raw, dict):
            raise ValueError(f"{where}: expected a mapping")
        unknown = sorted(set(raw) - {"name", "tenant", "key", "key_sha256", "limits"})
        if unknown:
            raise ValueError(f"{where}: unknown field {unknown[0]!r}")
        name, tenant = raw.get("name"), raw.get("tenant", raw.get("name"))
        for label, value in (("name", name), ("tenant", tenant)):
            if not isinstance(value, str) or not NAME.match(value):
                raise ValueError(f"{where}.{label}: expected a plain name (letters, digits, ._-)")
        if ("key" in raw) == ("key_sha256" in raw):
            raise ValueError(f"{where}: give exactly one of 'key' and 'key_sha256'")
        if "key" in raw:
            if not isinstance(raw["key"], str) or not raw["key"]:
                raise ValueError(f"{where}.key: expected a non-empty string")
            digest = hash_key(raw["key"])
        else:
            digest = str(raw["key_sha256"]).lower()
            if not _DIGEST.match(digest):
                raise ValueError(f"{where}.key_sha256: expected 64 hex digits")
        client = ClientKey(str(name), str(tenant), _limits_of(raw.get("limits"), where))
        table = table + KeyTable((KeyEntry(bytes.fromhex(digest), client),))
    return table


def load_keys_file(path: Path) -> KeyTable:
    """The key table of a keys file (YAML or TOML)."""
    return key_entries_of(read_keys_document(path), f"keys file {str(path)!r}")
