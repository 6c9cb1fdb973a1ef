"""A child engine server kept running: the embedded default's vLLM-CPU children.

:class:`Supervised` starts a server on a fixed loopback port and watches it, both from
a thread of its own that lives as long as the child should (a child's death signal
follows the thread that started it), so several start at once (:meth:`Supervised.begin`)
and each stops its child itself. When the child dies (it exits, or its ``/health``
refuses or answers an error twice in a row), the death is logged, its whole process
group is stopped, and it is started again on the same port, so the URL Ponder's
engine uses stays valid. Restarts wait a growing backoff (:class:`Backoff`), reset once
a restarted child has stayed up.

While it is down, a stand-in on its port answers every request with a 503 in the
OpenAI error shape that says what happened (Ponder's engine client reports the
engine's message), so a request in flight when the child died fails once, with the
reason; requests after the restart succeed.

>>> Backoff().delay(0), Backoff().delay(1), Backoff().delay(9)
(5.0, 10.0, 60.0)
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

__all__ = ["Backoff", "Supervised", "stand_in"]

log = logging.getLogger(__name__)

Start = Callable[[threading.Event], AbstractContextManager[Any]]
"""Runs the child (on the supervisor's port) for a block, yielding its process (what has
``poll()``); the event, once set, aborts a start under way."""


@dataclass(frozen=True)
class Backoff:
    """Seconds before restart ``attempt`` (0-based): ``first_s`` doubling up to ``most_s``."""

    first_s: float = 5.0
    most_s: float = 60.0
    settled_s: float = 120.0
    """A child up this long has settled: its next death starts the backoff over."""

    def delay(self, attempt: int) -> float:
        return float(min(self.most_s, self.first_s * 2**attempt))


class Supervised:
    """``with Supervised(start, port=..., name=...) as child:`` runs ``start`` and keeps
    it running until the block ends (see the module docs). ``restarts`` counts the
    restarts that came up; ``reason`` says why the child last went down.

    Without waiting for the start: :meth:`begin`, then :meth:`stop` (or
    :meth:`request_stop` first, for several children stopping side by side).
    """

    def __init__(
        self,
        start: Start,
        *,
        port: int,
        name: str,
        say: Callable[[str], None] = log.warning,
        backoff: Backoff = Backoff(),
        poll_s: float = 1.0,
    ) -> None:
        self._start, self.port, self.name, self._say = start, port, name, say
        self.backoff, self.poll_s = backoff, poll_s
        self.restarts = 0
        self.reason: str | None = None
        self.up: Future[None] = Future()
        """Settles once the first start ends: None when the child is up, else the
        start's error (then nothing is left running)."""
        self._stop = threading.Event()
        self._child = contextlib.ExitStack()
        self._process: Any = None
        self._thread: threading.Thread | None = None

    def begin(self) -> Future[None]:
        """Start the child on the supervising thread and return at once: :attr:`up`."""
        self._thread = threading.Thread(target=self._run, name=f"supervise-{self.name}")
        self._thread.start()
        return self.up

    def request_stop(self) -> None:
        """Tell the supervising thread to stop the child (a start under way is aborted),
        without waiting."""
        self._stop.set()

    def stop(self) -> None:
        """Stop the child, its start or its restarts, and wait until it has stopped."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._child.close()

    def __enter__(self) -> Supervised:
        self.begin()
        try:
            self.up.result()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- on the supervising thread -------------------------------------------------------
    def _run(self) -> None:
        try:
            try:
                self._process = self._child.enter_context(self._start(self._stop))
            except Exception as err:  # handed to whoever waits on ``up``
                self.up.set_exception(err)
                return
            self.up.set_result(None)
            self._watch()
        finally:  # the thread that started the child stops it, before it ends
            self._child.close()

    def _watch(self) -> None:
        attempt, up_since = 0, time.monotonic()
        while not self._stop.wait(self.poll_s):
            reason = self._trouble()
            if reason is None:
                continue
            if time.monotonic() - up_since > self.backoff.settled_s:
                attempt = 0
            self.reason = reason
            self._child.close()
            while not self._stop.is_set():
                delay = self.backoff.delay(attempt)
                attempt += 1
                why = f"the embedded engine serving {self.name!r} {reason}"
                self._say(f"{why}; restarting it in {delay:.0f} s (attempt {attempt})")
                with stand_in(self.port, f"{why}; it is being restarted"):
                    if self._stop.wait(delay):
                        return
                try:
                    self._process = self._child.enter_context(self._start(self._stop))
                except (RuntimeError, OSError) as err:
                    reason = f"did not restart ({err})"
                    continue
                self.restarts += 1
                up_since = time.monotonic()
                self._say(f"the embedded engine serving {self.name!r} was restarted")
                break

    def _trouble(self) -> str | None:
        """Why the child is down, or None while it is up (one failed health check is
        forgiven; a slow answer is not a failure)."""
        for _ in range(2):
            code = self._process.poll()
            if code is not None:
                return f"exited with code {code}"
            try:
                status = httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=30).status_code
            except httpx.TimeoutException:
                return None
            except httpx.HTTPError as err:
                failure = f"stopped answering its health check ({type(err).__name__})"
            else:
                if status == 200:
                    return None
                failure = f"failed its health check (HTTP {status})"
            if self._stop.wait(self.poll_s):
                return None
        return failure


@contextlib.contextmanager
def stand_in(port: int, message: str) -> Iterator[None]:
    """For the block, a server on loopback ``port`` that answers everything with a 503
    whose OpenAI-shaped error carries ``message``."""
    body = json.dumps(
        {"error": {"message": message, "type": "engine_unavailable", "param": None, "code": 503}}
    ).encode()

    class Unavailable(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.send_response(503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    try:
        server = ThreadingHTTPServer(("127.0.0.1", port), Unavailable)
    except OSError:  # the port is still held (a dying child): no stand-in this time
        yield
        return
    thread = threading.Thread(target=server.serve_forever, name=f"stand-in-{port}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
