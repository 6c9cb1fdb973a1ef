"""The key table and the keys file (server/keys.py): digests only, constant-time lookup
over every entry, bare keys named by position, a file's entries and its errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.keys import (
    ClientKey,
    KeyLimits,
    KeyTable,
    hash_key,
    load_keys_file,
    write_keys_document,
)
from server.settings import Settings, setting_errors


def test_the_table_keeps_digests_and_finds_each_key() -> None:
    table = KeyTable.of_flat_keys(["sk-a", "sk-b", "sk-a"])  # a repeat counts once
    assert table.names() == ("key-1", "key-2")
    assert table.lookup("sk-b") == ClientKey("key-2", "key-2")
    assert table.lookup("sk-") is None and table.lookup("") is None
    assert all(len(e.digest) == 32 for e in table.entries)
    assert b"sk-a" not in repr(table).encode() and "sk-a" not in repr(table)


def test_a_yaml_and_a_toml_file_describe_the_same_keys(tmp_path: Path) -> None:
    yaml_file = tmp_path / "keys.yaml"
    write_keys_document(
        yaml_file,
        {
            "keys": [
                {
                    "name": "alice",
                    "tenant": "team-a",
                    "key_sha256": hash_key("sk-alice"),
                    "limits": {"requests_per_minute": 60, "models": ["m"], "max_fanout": 8},
                },
                {"name": "bob", "key": "sk-bob"},  # the tenant defaults to the name
            ]
        },
    )
    assert yaml_file.stat().st_mode & 0o777 == 0o600
    toml_file = tmp_path / "keys.toml"
    toml_file.write_text(
        "[[keys]]\nname = 'alice'\ntenant = 'team-a'\n"
        f"key_sha256 = '{hash_key('sk-alice')}'\n"
        "limits = { requests_per_minute = 60, models = ['m'], max_fanout = 8 }\n"
        "[[keys]]\nname = 'bob'\nkey = 'sk-bob'\n"
    )
    for path in (yaml_file, toml_file):
        table = load_keys_file(path)
        limits = KeyLimits(requests_per_minute=60, models=("m",), max_fanout=8)
        assert table.lookup("sk-alice") == ClientKey("alice", "team-a", limits)
        assert table.lookup("sk-bob") == ClientKey("bob", "bob")


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "a"}, "exactly one of 'key' and 'key_sha256'"),
        ({"name": "a", "key": "k", "key_sha256": hash_key("k")}, "exactly one of"),
        ({"name": "a", "key_sha256": "beef"}, "keys[0].key_sha256: expected 64 hex digits"),
        ({"name": "a b", "key": "k"}, "keys[0].name: expected a plain name"),
        ({"name": "a", "key": "k", "colour": 1}, "unknown field 'colour'"),
        ({"name": "a", "key": "k", "limits": {"tokens_per_day": 0}}, "limits.tokens_per_day"),
        ({"name": "a", "key": "k", "limits": {"models": "m"}}, "limits.models"),
    ],
)
def test_a_bad_entry_is_named(tmp_path: Path, entry: dict[str, object], message: str) -> None:
    path = tmp_path / "keys.yaml"
    write_keys_document(path, {"keys": [entry]})
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_keys_file(path)


def test_two_keys_may_share_neither_a_name_nor_a_key(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    write_keys_document(path, {"keys": [{"name": "a", "key": "k"}, {"name": "a", "key": "j"}]})
    with pytest.raises(ValueError, match="two keys are named 'a'"):
        load_keys_file(path)
    write_keys_document(path, {"keys": [{"name": "a", "key": "k"}, {"name": "b", "key": "k"}]})
    with pytest.raises(ValueError, match="'b' is the same key as 'a'"):
        load_keys_file(path)


def test_settings_join_bare_keys_and_the_keys_file(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    write_keys_document(path, {"keys": [{"name": "alice", "tenant": "t", "key": "sk-alice"}]})
    table = Settings(api_keys=("sk-0", "sk-1"), keys_file=path).key_table()
    assert table.names() == ("key-1", "key-2", "alice")
    assert table.lookup("sk-1") == ClientKey("key-2", "key-2")
    assert Settings().key_table().enabled is False
    write_keys_document(path, {"keys": [{"name": "alice", "key": "x", "limits": {"rpm": 1}}]})
    with pytest.raises(ValueError) as raised:
        Settings(keys_file=path)
    assert "keys[0].limits: unknown limit 'rpm'" in setting_errors(raised.value)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="keys_file: no such file"):
        Settings(keys_file=tmp_path / "missing.yaml")


def test_the_readmes_keys_file_loads(tmp_path: Path) -> None:
    """README's "Sharing a server" keys file, as printed, is a keys file serve reads."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Sharing a server", 1)[1]
    listing = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "keys.yaml"
    path.write_text(listing)
    table = load_keys_file(path)
    assert table.names() == ("alice", "alice-ci", "bob")
    assert [e.key.tenant for e in table.entries] == ["team-a", "team-a", "team-b"]
    assert table.lookup("sk-bob-local") == ClientKey("bob", "team-b")


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("keys.yaml", "keys:\n  - name: a\n    key: sk-secret: [\n"),
        ("keys.toml", "key = 'sk-secret\n"),
    ],
)
def test_a_file_that_does_not_parse_is_named_without_its_text(
    tmp_path: Path, name: str, text: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ValueError, match=r"not valid (YAML \(line 3\)|TOML)") as raised:
        load_keys_file(path)
    assert "sk-secret" not in str(raised.value)
