"""Helpers for the eval client tests: a Ponder server on loopback over the fake engine."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvicorn

from server.app import create_app
from server.fake_engine import FakeEngineConfig, FakeEngineHandle, running_fake_engine
from server.settings import Settings

MODEL = "fake-model"
_SUM = re.compile(r"(\d{3})\+(\d{3})=")


def adder(body: dict[str, Any]) -> list[str]:
    """Answers the first ``a+b=`` in the prompt: right when a hash of the prompt, seed and
    sample index is even, off by one otherwise (so accuracy is neither 0 nor 1)."""
    messages = body.get("messages") or [{"content": body.get("prompt", "")}]
    prompt = "\n".join(str(m.get("content") or "") for m in messages)
    found = _SUM.search(prompt)
    total = int(found.group(1)) + int(found.group(2)) if found else 0
    texts = []
    for i in range(int(body.get("n") or 1)):
        h = zlib.crc32(f"{prompt}|{body.get('seed')}|{i}".encode())
        texts.append(f"Adding the digits column by column. \\boxed{{{total + h % 2}}}")
    return texts


@contextlib.contextmanager
def serve_ponder(engine: FakeEngineHandle, **settings: Any) -> Iterator[str]:
    """A real Ponder server (uvicorn in a thread, free port) fronting ``engine``;
    yields its ``/v1`` base URL."""
    fields: dict[str, Any] = {"model": MODEL, "engines": (engine.base_url,), **settings}
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        create_app(Settings(**fields)),
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=2,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            raise RuntimeError("ponder did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()


@contextlib.contextmanager
def ponder_over_fake(**settings: Any) -> Iterator[tuple[str, FakeEngineHandle]]:
    """(Ponder base URL, fake engine handle) with the :func:`adder` responder."""
    with (
        running_fake_engine(FakeEngineConfig(respond=adder)) as engine,
        serve_ponder(engine, **settings) as url,
    ):
        yield url, engine


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def keys(records: list[dict[str, Any]]) -> list[tuple[str, str, int]]:
    return [(r["scaffold"], r["id"], r["sample"]) for r in records]


def write_problems(path: Path, count: int, seed: int = 0) -> Path:
    from clients.eval.synthetic import write_addition

    write_addition(path, count, seed=seed)
    return path
