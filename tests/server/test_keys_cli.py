"""``ponder keys add|list|revoke`` (server/cli.py) on a keys file, and a real ``ponder serve``
child re-reading that file on SIGHUP under load: every request answered, the added key
accepted after, the revoked one refused, a broken file keeping the old keys."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from clients.cli import app
from scaffolds.processes.children import stop_group
from server.keys import hash_key, load_keys_file, read_keys_document
from testing.fake_engine import FakeEngineConfig, FakeEngineHandle, running_fake_engine
from tests.server.conftest import start_ponder_serve, wait_until


def keys(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["keys", *args])
    return result.exit_code, result.stdout, result.stderr


def test_add_prints_the_key_once_and_keeps_its_hash(tmp_path: Path) -> None:
    file = str(tmp_path / "keys.yaml")
    limits = ("--requests-per-minute", "60", "--tokens-per-day", "100000", "--model", "m")
    code, out, err = keys("add", "alice", "--tenant", "team-a", "--file", file, *limits)
    key = out.strip()
    assert code == 0 and key.startswith("sk-ponder-") and "shown once" in err
    text = Path(file).read_text()
    assert key not in text and hash_key(key) in text
    found = load_keys_file(Path(file)).lookup(key)
    assert found is not None and found.tenant == "team-a"
    assert found.limits.requests_per_minute == 60 and found.limits.models == ("m",)
    assert keys("add", "alice", "--file", file)[0] == 2  # a name is added once
    code, out, _ = keys("list", "--file", file)
    assert code == 0 and out.startswith("alice\ttenant=team-a\t") and key not in out
    assert hash_key(key) not in out
    assert keys("revoke", "alice", "--file", file)[0] == 0
    assert read_keys_document(Path(file))["keys"] == []
    code, _, err = keys("revoke", "alice", "--file", file)
    assert code == 2 and "no key named 'alice'" in err


@pytest.fixture
def slow_engine() -> Iterator[FakeEngineHandle]:
    with running_fake_engine(FakeEngineConfig(latency_per_token=0.005)) as handle:
        yield handle


def test_sighup_reloads_the_keys_without_dropping_a_request(
    slow_engine: FakeEngineHandle, tmp_path: Path
) -> None:
    file = tmp_path / "keys.yaml"
    bob = keys("add", "bob", "--file", str(file))[1].strip()
    env = {**os.environ, "PONDER_HOME": str(tmp_path)}
    proc, url = start_ponder_serve(
        slow_engine.base_url, "sk-bare", "--keys-file", str(file), env=env
    )
    statuses: list[int] = []
    stop = threading.Event()

    def post(key: str) -> int:
        body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
        headers = {"Authorization": f"Bearer {key}"}
        return httpx.post(
            f"{url}/v1/chat/completions", json=body, headers=headers, timeout=300
        ).status_code

    def load() -> None:
        while not stop.is_set():
            statuses.append(post("sk-bare"))

    threads = [threading.Thread(target=load) for _ in range(4)]
    try:
        for thread in threads:
            thread.start()
        assert post(bob) == 200
        carol = keys("add", "carol", "--file", str(file))[1].strip()
        assert keys("revoke", "bob", "--file", str(file))[0] == 0
        assert post(carol) == 401  # not read yet
        for _ in range(3):  # several reloads while requests run
            os.kill(proc.pid, signal.SIGHUP)
        assert wait_until(lambda: post(carol) == 200, within=120), "the new key was not read"
        assert post(bob) == 401
        file.write_text("keys: [{name: broken}]\n")  # a broken file: the old keys stay
        os.kill(proc.pid, signal.SIGHUP)
        assert wait_until(lambda: len(statuses) > 40, within=300)
        assert post(carol) == 200 and proc.poll() is None
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        stop_group(proc)
    _, stderr = proc.communicate(timeout=60)
    assert statuses and set(statuses) == {200}, statuses
    assert "keys reloaded" in stderr and "keys not reloaded" in stderr
    for key in (bob, carol, "sk-bare"):
        assert key not in stderr


def test_sighup_with_workers_brings_each_worker_the_new_keys(
    slow_engine: FakeEngineHandle, tmp_path: Path
) -> None:
    """With ``--workers 2`` uvicorn's supervisor takes SIGHUP: it starts a new worker
    (which reads the file) before it retires each old one, which drains."""
    file = tmp_path / "keys.yaml"
    keys("add", "bob", "--file", str(file))
    env = {**os.environ, "PONDER_HOME": str(tmp_path)}
    proc, url = start_ponder_serve(
        slow_engine.base_url, "sk-bare", "--keys-file", str(file), "--workers", "2", env=env
    )

    def post(key: str) -> int:
        """The status, or 0 when the connection failed (a worker being replaced on a
        loaded machine may close one: the wait below asks again)."""
        body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
        headers = {"Authorization": f"Bearer {key}"}
        try:
            reply = httpx.post(
                f"{url}/v1/chat/completions", json=body, headers=headers, timeout=300
            )
        except httpx.TransportError:
            return 0
        return reply.status_code

    try:
        carol = keys("add", "carol", "--file", str(file))[1].strip()
        assert post(carol) == 401
        os.kill(proc.pid, signal.SIGHUP)
        # Once both old workers are retired, every request (on either worker) knows carol.
        assert wait_until(lambda: all(post(carol) == 200 for _ in range(6)), within=300)
        assert post("sk-bare") == 200 and proc.poll() is None
    finally:
        stop_group(proc)
        proc.communicate(timeout=60)
