"""A client's leave under load: how soon Ponder lets go of the engine call it left.

Ponder (in this process, uvicorn on a thread) serves a vLLM-CPU engine (the tiny random
Llama of :mod:`testing.vllm`) while ``--hogs`` busy loops (``python3 -c "while True:
pass"``, one per core by default) starve the machine. Each of ``--leaves`` times, an
openai SDK client streams a chat completion of ``--samples`` x ``--max-tokens`` tokens
(``ignore_eos``, as ``tests/server/test_vllm_e2e.py`` does), reads until three samples
have written text, and leaves (closes the stream). From that moment it times:

- (a) *cancel*: the engine call's consumer left, as ``MeteredEngine`` logs it
  (``ponder.engine_calls``, debug);
- (b) *closed*: ``MeteredEngine`` has closed the engine stream (its log line); *socket*:
  the kernel lists one fewer of the connections to vLLM's port established at the leave
  (``/proc/net/tcp``; the first to go is the call's own: the others sit idle in a pool
  whose keep-alive lasts seconds);
- (c) *released*: the model's ``SequenceGate`` gave the call's sequences back (its
  ``on_change`` hook, the one that feeds ``ponder_sequences_in_flight``);
- (d) *recorded*: ``ponder_engine_calls_total{outcome="cancelled"}`` rose (its log line,
  and the counter read);
- (e) *vLLM idle*: vLLM's ``vllm:num_requests_running`` is 0 (polled every 0.5 s), so
  vLLM saw the leave and aborted the request.

Every clock is ``time.time()`` of this one process. Nothing here is a pass/fail bound:
a leave waits up to ``--timeout`` s for each moment and reports what it saw.

    python -m benchmarks.client_leave                  # 3 leaves, 2 hogs
    python -m benchmarks.client_leave --leaves 5 --hogs 0
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODEL = "tiny"
MOMENTS = ("cancel", "closed", "socket", "released", "recorded", "vllm_idle")


@dataclass
class Leave:
    """One leave's clock readings (``time.time()``); None: not seen within the timeout."""

    opened: float
    outcome: str = "-"
    first_text: float = 0.0
    left: float = 0.0
    seen: dict[str, float] = field(default_factory=dict)
    tokens: float = 0.0

    def after(self, moment: str) -> float | None:
        at = self.seen.get(moment)
        return None if at is None else at - self.left


class Watch(logging.Handler):
    """Timestamps ``MeteredEngine``'s debug lines, and the gate's changes, as they come."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[float, str]] = []
        self.in_flight: list[tuple[float, int]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.created, record.getMessage()))

    def hook(self, previous: Callable[[int, int], None] | None) -> Callable[[int, int], None]:
        def on_change(held: int, queued: int) -> None:
            self.in_flight.append((time.time(), held))
            if previous is not None:
                previous(held, queued)

        return on_change

    def line_after(self, since: float, text: str) -> float | None:
        return next((at for at, line in self.lines if at >= since and text in line), None)

    def released_after(self, since: float) -> float | None:
        return next((at for at, held in self.in_flight if at >= since and held == 0), None)


def established(port: int) -> set[int]:
    """Local ports of this machine's established TCP connections to ``port`` on loopback."""
    found: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            parts = row.split()
            local, remote, state = parts[1], parts[2], parts[3]
            if state == "01" and int(remote.rsplit(":", 1)[1], 16) == port:
                found.add(int(local.rsplit(":", 1)[1], 16))
    return found


def progress(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def open_stream(client: Any, args: argparse.Namespace) -> Any:
    """One long chat stream: ``args.samples`` samples of ``args.max_tokens`` tokens each,
    the end of sequence ignored so that each writes them all."""
    return client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "count"}],
        stream=True,
        max_tokens=args.max_tokens,
        n=args.samples,
        extra_body={"ignore_eos": True},
    )


def leave_once(
    client: Any, vllm: Any, engine: Any, watch: Watch, args: argparse.Namespace, index: int
) -> Leave:
    """Open a long stream, leave it once three samples write, and time what follows."""
    vllm_port = int(vllm.base_url.rsplit(":", 1)[1].split("/")[0])
    tokens_before = vllm.metric("vllm:generation_tokens_total")
    counter = engine.metrics.engine_calls.labels(model=MODEL, outcome="cancelled")
    cancelled_before = counter._value.get()
    leave = Leave(opened=time.time())
    stream = open_stream(client, args)
    written = 0
    for chunk in stream:
        written += sum(bool(c.delta.content) for c in chunk.choices)
        if written and not leave.first_text:
            leave.first_text = time.time()
        if written >= 3:
            break
    ours = established(vllm_port)  # this call's among them (see the module's notes)
    leave.left = time.time()
    stream.close()
    deadline = leave.left + args.timeout
    next_note = time.monotonic() + 2
    idle = threading.Thread(target=wait_idle, args=(vllm, leave, deadline), daemon=True)
    idle.start()
    while time.time() < deadline:
        now = time.time()
        seen = leave.seen
        if "cancel" not in seen and (at := watch.line_after(leave.left, "consumer left")):
            seen["cancel"] = at
        if "closed" not in seen and (at := watch.line_after(leave.left, "stream is closed")):
            seen["closed"] = at
        if "socket" not in seen and len(ours & established(vllm_port)) < len(ours):
            seen["socket"] = now
        if "released" not in seen and (at := watch.released_after(leave.left)):
            seen["released"] = at
        if "recorded" not in seen and counter._value.get() > cancelled_before:
            at = watch.line_after(leave.left, "recorded as cancelled")
            seen["recorded"] = at if at is not None else now
        if all(m in seen for m in MOMENTS):
            break
        if time.monotonic() >= next_note:
            next_note = time.monotonic() + 5
            waiting = ", ".join(m for m in MOMENTS if m not in seen)
            progress(
                f"leave {index}/{args.leaves}: {now - leave.left:.1f} s after the leave, "
                f"waiting for {waiting} (gives up in {deadline - now:.0f} s)"
            )
        time.sleep(0.005)
    idle.join()
    ended = [line for at, line in watch.lines if at >= leave.opened and "recorded as" in line]
    leave.outcome = ",".join(line.rsplit(" ", 1)[1] for line in ended) or "-"
    leave.tokens = vllm.metric("vllm:generation_tokens_total") - tokens_before
    return leave


def read_all(client: Any, vllm: Any, args: argparse.Namespace) -> tuple[float, float]:
    """Seconds to read one long stream to its end, and the tokens vLLM wrote for it."""
    before = vllm.metric("vllm:generation_tokens_total")
    started = time.monotonic()
    stream = open_stream(client, args)
    for _ in stream:
        pass
    return time.monotonic() - started, vllm.metric("vllm:generation_tokens_total") - before


def wait_idle(vllm: Any, leave: Leave, deadline: float) -> None:
    """Note when vLLM runs no request (polled every 0.5 s; a scrape may itself be slow)."""
    while time.time() < deadline:
        if vllm.metric("vllm:num_requests_running") == 0:
            leave.seen["vllm_idle"] = time.time()
            return
        time.sleep(0.5)


def report(leaves: list[Leave], args: argparse.Namespace) -> None:
    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    print(f"\n{args.leaves} leaves, {args.hogs} hogs, {args.samples} x {args.max_tokens} tokens")
    heads = ["leave", "first text", *(f"->{m}" for m in MOMENTS), "tokens", "outcome"]
    print("| " + " | ".join(heads) + " |")
    print("|" + "---:|" * len(heads))
    for i, leave in enumerate(leaves, 1):
        row = [str(i), f"{leave.first_text - leave.opened:.2f}"]
        row += [cell(leave.after(m)) for m in MOMENTS]
        row += [f"{leave.tokens:.0f}", leave.outcome]
        print("| " + " | ".join(row) + " |")
    print("(seconds; 'first text' from the request, the others from the client's leave)")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--leaves", type=int, default=3)
    parser.add_argument("--hogs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=1800)
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait per leave")
    parser.add_argument(
        "--full",
        type=int,
        default=1,
        help="streams read to their end first, timed (what a test pays when vLLM's abort "
        "lands too late to save a token)",
    )
    args = parser.parse_args()

    import openai

    from scaffolds.engines.vllm_server import vllm_python
    from scaffolds.processes.children import popen_owned, stop_group
    from server.app.app import create_app
    from server.settings import Settings
    from testing.ponder import wait_for_answer_pool
    from testing.threaded import serving_in_thread
    from testing.vllm import running_tiny_vllm

    python = vllm_python()
    if python is None:
        sys.exit("no vLLM venv: run `make vllm` first")
    watch = Watch()
    logger = logging.getLogger("ponder.engine_calls")
    logger.addHandler(watch)
    logger.setLevel(logging.DEBUG)
    hogs = [popen_owned([sys.executable, "-c", "while True: pass"]) for _ in range(args.hogs)]
    leaves: list[Leave] = []
    full: list[tuple[float, float]] = []
    try:
        progress(f"{args.hogs} hogs running; starting vLLM-CPU (a few minutes when starved)")
        started = time.monotonic()
        with running_tiny_vllm(python, "vllm-client-leave.log") as vllm:
            progress(f"vLLM-CPU up in {time.monotonic() - started:.0f} s; starting Ponder")
            settings = Settings(
                model=MODEL,
                engines=(vllm.base_url,),
                engine_model=vllm.model,
                default_max_tokens=12,
                engine_max_retries=1,
            )
            app = create_app(settings)
            with serving_in_thread(app) as url:
                wait_for_answer_pool(app)
                engine = app.state.serving.served.models[MODEL].engine
                engine.gate.on_change = watch.hook(engine.gate.on_change)
                client = openai.OpenAI(
                    base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=args.timeout
                )
                warm = client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "hello"}], stream=True
                )
                for _ in warm:  # the engine's first call opens what later calls reuse
                    pass
                for i in range(1, args.full + 1):
                    progress(f"full stream {i}/{args.full}: {args.samples} x {args.max_tokens}")
                    full.append(read_all(client, vllm, args))
                    progress(f"full stream {i}: {full[-1][0]:.1f} s, {full[-1][1]:.0f} tokens")
                for i in range(1, args.leaves + 1):
                    spent = time.monotonic() - started
                    progress(f"leave {i}/{args.leaves} (elapsed {spent:.0f} s)")
                    leaves.append(leave_once(client, vllm, engine, watch, args, i))
                    done = leaves[-1]
                    progress(
                        f"leave {i} ({done.outcome}): first text "
                        f"{done.first_text - done.opened:.1f} s; "
                        + ", ".join(f"{m} {cell_of(done.after(m))}" for m in MOMENTS)
                    )
    finally:
        for hog in hogs:
            stop_group(hog, grace_s=1)
        logger.removeHandler(watch)
    report(leaves, args)
    for seconds, tokens in full:
        print(f"a whole stream: {seconds:.1f} s for {tokens:.0f} tokens")


def cell_of(value: float | None) -> str:
    return "unseen" if value is None else f"{value:.3f} s"


if __name__ == "__main__":
    main()
