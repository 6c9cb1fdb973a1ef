"""Ponder -> vllm-router -> two vLLM-CPU workers serving the shipped addition model.

Ponder is given the router's one URL (deploy/README.md, "Past one replica"), so its own
pool sees one replica and the router picks the worker. Each engine call names its run's
affinity key in ``x-session-id`` (``scaffolds.engines.openai_http.AFFINITY_HEADER``), which
the router's ``consistent_hash`` policy reads first (vllm-project/router
``src/policies/hash_key.rs``, ``SESSION_HEADER_NAMES``): a run stays on one worker. The
workers' own counters tell where calls went. The last test kills a worker, so the module's
workers are its own. Workers and router each lead an owned process group, stopped at the
module's end (the session fails on any process left: ``testing.process_guard``). The
module took 81 to 122 s on a busy 2-core box, 60 to 100 s of it starting the two workers.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from scaffolds.engines.vllm_server import VLLMServer
from scaffolds.models import model_path
from server.settings import Settings
from testing.ponder import running_ponder
from testing.vllm import ABORT_TEST_BOUND_S, ABORT_TEST_TIMEOUT_S, CACHE, vllm_python_or_skip
from testing.vllm_router import (
    RouterServer,
    router_binary_or_skip,
    running_vllm_router,
    running_workers,
    worker_calls,
)

pytestmark = pytest.mark.vllm

MODEL = "addition"
BOUND_S = ABORT_TEST_BOUND_S
"""The bound on a leaving or killing test's own waits, below its pytest timeout (each took
1 to 4 s on a busy 2-core box)."""


@pytest.fixture(scope="module")
def router() -> Iterator[RouterServer]:
    binary = router_binary_or_skip()
    python = vllm_python_or_skip()
    CACHE.mkdir(exist_ok=True)
    with (
        running_workers(
            python,
            model_path("ponder-addition"),
            served_name=MODEL,
            log_prefix=CACHE / "router-worker",
        ) as workers,
        running_vllm_router(
            workers,
            policy="consistent_hash",
            log_path=CACHE / "vllm-router-test.log",
            binary=binary,
        ) as router,
    ):
        yield router


@pytest.fixture(scope="module")
def ponder(router: RouterServer) -> Iterator[str]:
    settings = Settings(
        model=MODEL,
        engines=(router.base_url,),
        engine_model=MODEL,
        default_max_tokens=8,
        engine_max_retries=3,
    )
    with running_ponder(settings) as url:
        yield url


def _client(ponder: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{ponder}/v1", api_key="unused", max_retries=0, timeout=BOUND_S)


@pytest.mark.parametrize(
    ("spec", "problem"),
    [("gsr(n=2)", "347+589="), ("rc(steps=2, reasoning_tokens=8, summary_tokens=6)", "123+456=")],
)
def test_a_scaffold_run_answers_and_all_its_calls_land_on_one_worker(
    router: RouterServer, ponder: str, spec: str, problem: str
) -> None:
    before = worker_calls(router.workers)
    out = _client(ponder).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": problem}],
        extra_body={"scaffold": spec},
    )
    assert out.choices[0].finish_reason in ("stop", "length")
    assert out.usage is not None and out.usage.model_extra is not None
    calls = out.usage.model_extra["engine_calls"]
    assert calls >= 2
    grown = [after - b for after, b in zip(worker_calls(router.workers), before, strict=True)]
    # vLLM counts a request of n samples as n; every call is on ONE worker, none elsewhere.
    assert sorted(grown)[0] == 0 and sorted(grown)[1] >= calls, grown


SAMPLES = 16
FULL = SAMPLES * 1800


@pytest.mark.timeout(ABORT_TEST_TIMEOUT_S)
def test_a_client_that_leaves_mid_stream_cancels_the_workers_calls(
    router: RouterServer, ponder: str
) -> None:
    """Ponder closes its stream to the router, the router closes its own to the worker,
    and vLLM aborts: no request runs on either worker, and of up to 3 leaves one shows
    the worker stopped before writing every token."""
    deadline = time.monotonic() + BOUND_S
    client = _client(ponder)
    generated = float(FULL)
    for _ in (1, 2, 3):
        before = sum(w.metric("vllm:generation_tokens_total") for w in router.workers)
        with client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "999+999="}],
            stream=True,
            max_tokens=1800,
            n=SAMPLES,
            extra_body={"ignore_eos": True},
        ) as stream:
            written = 0
            for chunk in stream:
                written += sum(bool(c.delta.content) for c in chunk.choices)
                if written >= 3:
                    break
            else:
                pytest.fail("the stream ended before the client could leave")
        while _running(router.workers) > 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _running(router.workers) == 0
        generated = sum(w.metric("vllm:generation_tokens_total") for w in router.workers) - before
        if generated < FULL:
            break
    assert 3 <= generated < FULL


def _running(workers: tuple[VLLMServer, ...]) -> float:
    return sum(w.metric("vllm:num_requests_running") for w in workers)


@pytest.mark.timeout(ABORT_TEST_TIMEOUT_S)
def test_a_worker_killed_under_load_loses_no_run(router: RouterServer, ponder: str) -> None:
    """Runs spread over both workers; one worker is SIGKILLed (its whole process group)
    while they run, once it is seen busy with them (a request running, or its prompt
    counter grown: a counter, which a slow poll cannot miss). Each call it held, or is
    still to get, fails there; the router marks it down (its circuit breaker and 1-s
    health poll) and Ponder retries the call, which the router sends to the live worker:
    every run answers. A batch that ends before the worker is seen busy (a fast machine,
    or slow polls: CI once saw a whole batch end unseen) answers too, and the next batch
    is tried, up to three. Runs last."""
    client = _client(ponder)
    victim = router.workers[1]
    assert victim.process is not None

    def run(problem: str) -> str:
        out = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": problem}],
            max_tokens=600,
            extra_body={"scaffold": "gsr(n=2)", "ignore_eos": True},
        )
        return out.choices[0].finish_reason or ""

    deadline = time.monotonic() + BOUND_S
    for batch in range(3):
        problems = [f"{a}+{a + 111}=" for a in range(100 + 24 * batch, 124 + 24 * batch)]
        prompted = victim.metric("vllm:prompt_tokens_total")
        with ThreadPoolExecutor(len(problems)) as pool:
            futures = [pool.submit(run, p) for p in problems]
            while not all(f.done() for f in futures) and not _busy(victim, prompted):
                assert time.monotonic() < deadline, "the runs neither ended nor reached the victim"
                time.sleep(0.05)
            killed = not all(f.done() for f in futures)
            if killed:
                os.killpg(victim.process.pid, signal.SIGKILL)
            reasons = [f.result(timeout=max(1.0, deadline - time.monotonic())) for f in futures]
        assert reasons == ["length"] * len(problems)
        if killed:
            break
    else:
        pytest.fail("three batches of runs each ended before the victim was seen busy")
    survivor = router.workers[0]
    assert survivor.metric("vllm:num_requests_running") == 0


def _busy(worker: VLLMServer, prompted: float) -> bool:
    """Whether ``worker`` runs a request now, or has taken prompts since ``prompted``."""
    return (
        worker.metric("vllm:num_requests_running") > 0
        or worker.metric("vllm:prompt_tokens_total") > prompted
    )
