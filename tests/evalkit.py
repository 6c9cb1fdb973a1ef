"""Helpers for the eval client tests: a Ponder server on loopback over the fake engine."""

from __future__ import annotations

import contextlib
import json
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from server.app.app import create_app
from server.settings import Settings
from testing.fake_engine import FakeEngineConfig, FakeEngineHandle, running_fake_engine
from testing.threaded import serving_in_thread

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
    with serving_in_thread(create_app(Settings(**fields))) as url:
        yield f"{url}/v1"


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
    from scaffolds.evaluation.synthetic import write_addition

    write_addition(path, count, seed=seed)
    return path
