"""``ponder serve`` as a real process: flags, logs, graceful shutdown on SIGTERM."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from clients.cli import app
from scaffolds.engines.vllm_server import free_port
from scaffolds.processes.children import popen_owned, stop_group
from testing.fake_engine import FakeEngineConfig, FakeEngineHandle, running_fake_engine
from testing.process_guard import children_of, gone
from tests.server.conftest import start_ponder_serve, wait_until

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-cli-secret-key"


def test_help_documents_every_flag_and_env_var() -> None:
    result = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    text = result.output
    for flag, env in [
        ("--engine", "PONDER_ENGINES"),
        ("--model", "PONDER_MODEL"),
        ("--alias", "PONDER_ALIASES"),
        ("--api-key", "PONDER_API_KEYS"),
        ("--api-key-file", "PONDER_API_KEY_FILE"),
        ("--engine-api-key", "PONDER_ENGINE_API_KEY"),
        ("--host", "PONDER_HOST"),
        ("--port", "PONDER_PORT"),
        ("--config", "PONDER_CONFIG"),
        ("--max-concurrent-runs", "PONDER_MAX_CONCURRENT_RUNS"),
        ("--queue-size", "PONDER_QUEUE_SIZE"),
        ("--reserved-runs", "PONDER_RESERVED_RUNS"),
        ("--max-body-bytes", "PONDER_MAX_BODY_BYTES"),
        ("--graceful-timeout", "PONDER_GRACEFUL_TIMEOUT_S"),
    ]:
        assert flag in text and env in text, flag


def test_bad_settings_name_the_parameter() -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["serve", "--model", "m", "--engine", "http://e:1"])
    assert result.exit_code == 2
    assert "engines" in result.output and "/v1" in result.output
    result = runner.invoke(
        app, ["serve", "--model", "m", "--engine", "http://e:1/v1", "--alias", "g=gsr(n=0)"]
    )
    assert result.exit_code == 2
    assert "aliases.m+g.n" in result.output
    result = runner.invoke(app, ["serve", "--alias", "g=gsr(n=2)"])
    assert result.exit_code == 2 and "flat aliases need --model" in result.output


def test_the_transformers_engine_serves_in_process_beside_a_vllm_venv() -> None:
    """``--embedded-engine transformers`` serves in process even where ``.venv-vllm``
    exists (``auto`` would start vLLM-CPU children there). The embedded default served
    end to end, in process and on vLLM-CPU, is tests/test_fresh_clone.py's."""
    from server.pool import embedded
    from server.settings import Settings
    from testing.vllm import vllm_python_or_skip

    vllm_python_or_skip()
    only_addition = Settings(embedded_engine="transformers", embedded_models=("ponder-addition",))
    heard: list[str] = []
    with embedded.embedded_default(only_addition, heard.append) as s:
        [served] = s.served_models()
    assert heard == ["serving 'ponder-addition' in process (transformers)"]
    assert served.engines == (f"local:{embedded.SHIPPED_MODEL_DIR}",)


@pytest.mark.vllm
def test_sigterm_while_vllm_starts_stops_vllm_too() -> None:
    """Two models (the addition model and SmolLM2): their vLLM children start side by
    side, and SIGTERM while both start stops both."""
    from testing.vllm import vllm_python_or_skip

    vllm_python_or_skip()
    two = ["--embedded-model", "ponder-addition", "--embedded-model", "smollm2-135m-instruct"]
    proc = popen_owned(
        [sys.executable, "-m", "clients.cli", "serve", "--port", str(free_port()), *two],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_until(lambda: len(children_of(proc.pid)) == 2, within=300)
        engines = children_of(proc.pid)
        time.sleep(2)  # vLLM is mid-start: loading, not serving yet
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=120)
        finally:
            stop_group(proc)
    assert wait_until(lambda: all(map(gone, engines)), within=120), "vLLM outlived the server"


def test_serve_refuses_a_vllm_embedded_engine_without_its_venv(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["serve", "--embedded-engine", "vllm", "--port", "0"],
        env={"PONDER_VLLM_PYTHON": str(tmp_path / "no-python")},
    )
    assert result.exit_code == 1
    assert "no vLLM venv" in result.output


@pytest.fixture
def fake() -> Iterator[FakeEngineHandle]:
    with running_fake_engine(FakeEngineConfig()) as handle:
        yield handle


def _start(fake: FakeEngineHandle, *args: str) -> tuple[subprocess.Popen[str], str]:
    return start_ponder_serve(fake.base_url, KEY, *args)


def _post(url: str, results: list[Any], **body: Any) -> None:
    try:
        response = httpx.post(
            f"{url}/v1/chat/completions",
            json={"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], **body},
            headers={"Authorization": f"Bearer {KEY}"},
            timeout=300,
        )
        results.append(response)
    except httpx.HTTPError as exc:
        results.append(exc)


def _refused(url: str) -> bool:
    port = int(url.rsplit(":", 1)[1])
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return False
    except OSError:
        return True


def test_sigterm_finishes_in_flight_requests_then_exits(fake: FakeEngineHandle) -> None:
    fake.config.latency_per_token = 0.25  # ~14 tokens: a few seconds per call
    proc, url = _start(fake, "--graceful-timeout", "30")
    try:
        results: list[Any] = []
        workers = [
            threading.Thread(target=_post, args=(url, results)),
            threading.Thread(target=_post, args=(url, results), kwargs={"stream": True}),
        ]
        for w in workers:
            w.start()
        assert wait_until(lambda: fake.state.open_calls == 2, within=120)
        proc.send_signal(signal.SIGTERM)
        assert wait_until(
            lambda: _refused(url) or not any(w.is_alive() for w in workers), within=120
        )
        for w in workers:
            w.join(timeout=300)
        assert proc.wait(timeout=120) in (0, -signal.SIGTERM)  # uvicorn re-raises it
    finally:
        stop_group(proc, grace_s=0)
    statuses = [r.status_code if isinstance(r, httpx.Response) else r for r in results]
    assert statuses == [200, 200], statuses
    assert fake.state.completed == 2 and fake.state.cancelled == 0
    streamed = next(r for r in results if r.headers["content-type"].startswith("text/event"))
    assert streamed.text.rstrip().endswith("data: [DONE]")
    # Structured logs: JSON lines with request ids, never the API key.
    stderr = proc.stderr.read() if proc.stderr else ""
    records = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    assert any(r.get("request_id") and r.get("status") == 200 for r in records)
    assert KEY not in stderr


def test_sigterm_cancels_runs_past_the_grace_period(fake: FakeEngineHandle) -> None:
    fake.config.hang = True
    proc, url = _start(fake, "--graceful-timeout", "1")
    try:
        results: list[Any] = []
        worker = threading.Thread(target=_post, args=(url, results))
        worker.start()
        assert wait_until(lambda: fake.state.open_calls == 1, within=120)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) in (0, -signal.SIGTERM)
        worker.join(timeout=120)
    finally:
        stop_group(proc, grace_s=0)
    assert wait_until(lambda: fake.state.cancelled == 1 and fake.state.open_calls == 0, within=120)
    assert results and not (
        isinstance(results[0], httpx.Response) and results[0].status_code == 200
    )


def test_serve_with_the_embedded_engine_off_needs_an_engine() -> None:
    result = CliRunner().invoke(app, ["serve", "--embedded-engine", "off", "--port", "0"])
    assert result.exit_code == 1
    assert "no engine configured" in result.output and "embedded engine is off" in result.output


def test_flat_dialect_reaches_the_served_model() -> None:
    from server.settings import Settings

    settings = Settings(model="m", engines=("http://e:1/v1",), dialect="sglang")
    assert settings.served_models()[0].dialect == "sglang"


def test_a_taken_port_fails_at_once_before_any_engine_starts() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # No engine: the embedded default would load models for minutes if it got that far.
        result = CliRunner().invoke(app, ["serve", "--host", "127.0.0.1", "--port", str(port)])
    assert result.exit_code == 2, result.output
    assert f"port: 127.0.0.1:{port} is in use" in result.output
    assert "serves" not in result.output and "in process" not in result.output


def test_port_0_serves_on_the_free_port_it_announces(fake: FakeEngineHandle) -> None:
    proc = popen_owned(
        [
            sys.executable,
            "-m",
            "clients.cli",
            "serve",
            "--engine",
            fake.base_url,
            "--model",
            "fake-model",
            "--port",
            "0",
            "--engine-max-retries",
            "0",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        announced = None
        while announced is None and (line := proc.stderr.readline()):
            announced = re.search(r"ponder serve: (http://127\.0\.0\.1:(\d+))/v1 is bound", line)
        assert announced, "no bound port announced"
        url, port = announced.group(1), int(announced.group(2))
        assert port > 0

        def listed() -> bool:
            try:
                return httpx.get(f"{url}/v1/models", timeout=5).status_code == 200
            except httpx.HTTPError:
                return proc.poll() is not None

        assert wait_until(listed, within=300) and proc.poll() is None
        assert [m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]] == ["fake-model"]
    finally:
        stop_group(proc)
