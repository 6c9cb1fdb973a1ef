"""A public clone, as a newcomer gets it (issue 39): the tracked files in a folder with
nothing beside it (no ``../shared``), the README's first screens run as pasted, and every
model, alias and playground preset Ponder lists answers on the embedded default.

The clone reuses this checkout's ``.venv`` (its folders linked, its setup stamps fresh),
so ``make serve`` skips the install and serves at once; ``PYTHONPATH`` points at the clone
so its code is what runs. The clone has no ``.venv-vllm``, so the embedded default is the
in-process engine, the one a newcomer without ``make vllm`` gets. The one change to the
commands is the port: 8000 may be taken on a shared machine, so the clone serves on a
free one (``make serve PORT=...``) and the curls are sent there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from scaffolds.engines.vllm_server import free_port
from scaffolds.processes.children import popen_owned, stop_group
from tests.server.conftest import parse_sse, wait_until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
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


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
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
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PONDER_", "PYTHON"))}
    env["PYTHONPATH"] = str(target)
    if "PONDER_HOME" in os.environ:  # prepared models are reused, not converted again
        env["PONDER_HOME"] = os.environ["PONDER_HOME"]
    yield target, env


@pytest.fixture(scope="module")
def served(clone: tuple[Path, dict[str, str]]) -> Iterator[tuple[str, Path]]:
    """``make serve`` in the clone, as pasted (on a free port), until its models list."""
    target, env = clone
    [first, *_] = _first_screens()
    assert [line.split("#")[0].strip() for line in first.strip().splitlines()] == [
        "make serve", "make test"
    ]  # fmt: skip
    port = free_port()
    log_path = target / "serve.log"
    log = log_path.open("w")
    proc = popen_owned(
        ["make", "serve", f"PORT={port}"], cwd=target, env=env, stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"

    def listed() -> bool:
        try:
            return httpx.get(f"{url}/v1/models", timeout=5).status_code == 200
        except httpx.HTTPError:
            return proc.poll() is not None

    try:
        assert wait_until(listed, within=900) and proc.poll() is None, log_path.read_text()
        yield url, target
    finally:
        stop_group(proc)
        log.close()


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
    served: tuple[str, Path], clone: tuple[Path, dict[str, str]]
) -> None:
    url, target = served
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
    served: tuple[str, Path],
) -> None:
    url, target = served
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
