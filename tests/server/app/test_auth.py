"""APIKeyAuth (server/app/auth.py): a key resolves to whom it stands for, a reload swaps the
table whole or keeps the old one, and a server that started with keys never opens."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.app.auth import APIKeyAuth
from server.errors import AuthenticationError
from server.keys import ANONYMOUS, ClientKey, load_keys_file, write_keys_document


def test_a_reload_swaps_the_table_or_keeps_the_old(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    write_keys_document(path, {"keys": [{"name": "alice", "tenant": "t", "key": "sk-a"}]})
    auth = APIKeyAuth(load_keys_file(path), load=lambda: load_keys_file(path), required=True)
    assert auth.check("Bearer sk-a") == ClientKey("alice", "t")
    write_keys_document(path, {"keys": [{"name": "bob", "key": "sk-b"}]})
    assert auth.reload()
    assert auth.check("Bearer sk-b").name == "bob"
    with pytest.raises(AuthenticationError):
        auth.check("Bearer sk-a")
    path.write_text("keys: [{name: nokey}]\n")
    assert not auth.reload()  # the old table stays
    assert auth.check("Bearer sk-b").name == "bob"


def test_a_server_with_keys_never_opens(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    write_keys_document(path, {"keys": []})  # a keys file with no key yet: nothing passes
    auth = APIKeyAuth(load_keys_file(path), load=lambda: load_keys_file(path), required=True)
    assert auth.enabled
    with pytest.raises(AuthenticationError):
        auth.check("Bearer anything")
    bare = APIKeyAuth(["sk-x"], load=lambda: load_keys_file(path))
    assert bare.reload() and bare.enabled  # the last key revoked: refused, not opened
    with pytest.raises(AuthenticationError):
        bare.check("Bearer sk-x")
    assert APIKeyAuth([]).check(None) == ANONYMOUS  # no keys at all: open, as before
