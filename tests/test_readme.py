"""Every fenced ``bash``/``python`` block of the READMEs runs here as pasted, or says why not.

The READMEs are README.md and those of docker/, deploy/, training/ and experiments/. A block
that is not run starts with one line, visible in the file and rendered::

    # not run in CI: <why> (a GPU, a cluster, hours, a Docker daemon, the network...)

:func:`test_every_command_block_runs_here_or_says_why_not` fails on a command block that is
neither run by a test of this file nor marked, and on a fence without a language (output and
listings are ``text``, ``yaml``, ``toml``, ``json``: not commands), and prints the marked
blocks with their reasons, so CI's log shows the count. README.md's first screen (the blocks
before its first ``## ``) is run by ``tests/test_fresh_clone.py`` against the real embedded
default in a clean clone; the other blocks run here:

- servers are real: ``ponder serve`` as the block starts it, or Ponder on loopback
  (:func:`testing.ponder.running_ponder`) serving the embedded default's model names and
  aliases, each in front of the fake engine (:mod:`testing.fake_engine`). Only host:port is
  substituted (a free loopback port for ``8000``/``8001``, or for ``gpu-a:8000``...);
- commands run with bash (``-euo pipefail``) in a temp folder that links this checkout's
  ``.venv`` and ``examples/`` (and holds a copy of ``experiments/``, whose report commands
  write beside their rows), with this checkout first on ``PYTHONPATH`` and ``.venv/bin`` first
  on ``PATH``, and ``PONDER_HOME`` a temp folder. That folder's dataset cache holds a stand-in
  ``gsm8k.jsonl`` (``examples/problems.jsonl``'s rows): CI is offline, and a named benchmark
  is read from that cache (:mod:`scaffolds.evaluation.named_datasets`) once downloaded.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from scaffolds.engines.vllm_server import free_port
from scaffolds.models import get_model
from scaffolds.processes.children import popen_owned, stop_group
from server.model_settings import ModelConfig
from server.settings import Settings
from testing.fake_engine import FakeEngineConfig, FakeEngineHandle, running_fake_engine
from testing.ponder import running_ponder
from tests.server.conftest import wait_until

ROOT = Path(__file__).resolve().parents[1]
READMES = (
    "README.md",
    "docker/README.md",
    "deploy/README.md",
    "training/README.md",
    "experiments/README.md",
)
MARKER = re.compile(r"# not run in CI: (?P<reason>\S.*)")
COMMANDS = ("bash", "python")
LISTINGS = ("text", "console", "yaml", "toml", "json")
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[^`\s]*)\s*$")
EMBEDDED = ("smollm2-135m-instruct", "smollm2-135m-gsr", "ponder-addition")
"""The embedded default's models, served here by the fake engine under their names and aliases."""


@dataclass(frozen=True)
class Block:
    """One fenced block: where it opens (1-based line of the fence), its tag and its text."""

    readme: str
    line: int
    lang: str
    text: str
    first_screen: bool

    @property
    def reason(self) -> str | None:
        """Why it is not run here (its marker line), or None."""
        first = self.text.lstrip("\n").partition("\n")[0]
        match = MARKER.fullmatch(first.strip())
        return match["reason"] if match else None

    def __str__(self) -> str:
        return f"{self.readme}:{self.line}"


def readme_blocks(readme: str) -> list[Block]:
    """The fenced blocks of one README, dedented by their fence's indent.

    >>> [b.lang for b in readme_blocks("deploy/README.md")]
    ['bash', 'bash']
    """
    blocks: list[Block] = []
    lines = (ROOT / readme).read_text().splitlines()
    first_screen = readme == "README.md"
    at = 0
    while at < len(lines):
        line = lines[at]
        if line.startswith("## "):
            first_screen = False
        opened = FENCE.match(line)
        if opened:
            end = next(i for i in range(at + 1, len(lines)) if lines[i].strip() == "```")
            indent = len(opened["indent"])
            text = "\n".join(row[indent:] for row in lines[at + 1 : end]) + "\n"
            blocks.append(Block(readme, at + 1, opened["lang"], text, first_screen))
            at = end
        at += 1
    return blocks


def all_blocks() -> list[Block]:
    return [block for readme in READMES for block in readme_blocks(readme)]


REPORTS = {
    "tiny_models": "experiments report experiments/tiny_models/results/base.json",
    "tiny_models_compare": "--model base=base_300.json:base",
    "rc_listsum": "rc_experiments report",
    "smollm2_refine": "smollm2_refine report $R --problems",
    "smollm2_verifier": "smollm2_verifier report",
    "effort_frontier": "python -m experiments.effort_frontier pools",
}
"""experiments/README.md's blocks that rebuild reports from the committed rows."""


RUN_HERE = {
    ("README.md", ".venv/bin/ponder serve --engine"): "test_serving_section_as_pasted",
    ("README.md", "-H 'Authorization: Bearer sk-local'"): "test_serving_section_as_pasted",
    ("README.md", 'extra_body={"return_trace": True}'): "test_serving_section_as_pasted",
    ("README.md", "from anthropic import Anthropic"): "test_serving_section_as_pasted",
    ("README.md", "from scaffolds import solve"): "test_from_python_against_make_serve_s_names",
    ("README.md", "ponder eval make-addition"): "test_evaluating_scaffolds_as_pasted",
    ("docker/README.md", '"ponder-addition+maj8"'): "test_docker_compose_cpu_curl",
    ("deploy/README.md", "--engine http://gpu-a:8000/v1"): "test_deploy_replicas_as_pasted",
    ("training/README.md", "ponder train data runs/gsr"): "test_training_data_as_pasted",
    **{
        ("experiments/README.md", h): "test_experiment_reports_rebuild_as_pasted"
        for h in REPORTS.values()
    },
}
"""The blocks this file runs: (README, a string only that block holds) -> the test."""


def block(readme: str, holding: str) -> Block:
    """The one block of ``readme`` that holds ``holding``."""
    found = [b for b in readme_blocks(readme) if holding in b.text]
    assert len(found) == 1, f"{readme}: {len(found)} blocks hold {holding!r}"
    return found[0]


def test_every_command_block_runs_here_or_says_why_not(capsys: pytest.CaptureFixture[str]) -> None:
    blocks = all_blocks()
    untagged = [str(b) for b in blocks if not b.lang]
    assert not untagged, f"fences without a language (bash, python, text, ...): {untagged}"
    unknown = [f"{b} ({b.lang})" for b in blocks if b.lang not in (*COMMANDS, *LISTINGS)]
    assert not unknown, f"a tag this test does not know: {unknown}"
    run_here: dict[Block, str] = {}
    for (readme, holding), test in RUN_HERE.items():
        found = block(readme, holding)
        assert found.lang in COMMANDS and found.reason is None, f"{found} is run here"
        assert test in globals(), test
        run_here[found] = test
    commands = [b for b in blocks if b.lang in COMMANDS]
    by_fresh_clone = [b for b in commands if b.first_screen]
    marked = [b for b in commands if b.reason is not None]
    stray = [b for b in blocks if b.lang not in COMMANDS and b.reason is not None]
    assert not stray, f"a marker on a block that is not a command: {stray}"
    missing = [
        str(b) for b in commands if b not in run_here and b not in by_fresh_clone and not b.reason
    ]
    assert not missing, (
        f"command blocks neither run by tests/test_readme.py nor marked "
        f"'# not run in CI: <why>' on their first line: {missing}"
    )
    assert not [b for b in by_fresh_clone if b.reason], "the first screen is run as pasted"
    assert (ROOT / "tests" / "test_fresh_clone.py").is_file()
    lines = [
        "",
        f"README blocks: {len(commands)} bash/python blocks; {len(run_here)} run by "
        f"tests/test_readme.py, {len(by_fresh_clone)} (README.md's first screen) by "
        f"tests/test_fresh_clone.py, {len(marked)} not run in CI:",
        *(f"  {b}: {b.reason}" for b in marked),
    ]
    with capsys.disabled():  # in CI's log even when it passes
        print("\n".join(lines))


COMMAND = re.compile(
    r"^(?:nohup )?(?P<head>(?:\.venv/bin/)?ponder"
    r"|(?:\.venv/bin/)?python3? -m (?:experiments|benchmarks)\S*)\s+(?P<rest>.*)"
)
"""A line of a marked block that runs this repository's code: ``ponder ...`` or
``python -m experiments...``/``benchmarks...``."""


def command_help(argv: list[str]) -> str | None:
    """The ``--help`` of ``ponder ARGS`` (in process) or ``python -m MODULE ARGS``; None when
    that is not a command."""
    if argv[0] == "ponder":
        from typer.testing import CliRunner

        from clients.cli import app

        result = CliRunner().invoke(app, [*argv[1:], "--help"], env={"COLUMNS": "300"})
        return result.output if result.exit_code == 0 else None
    # a process of its own: some stages start themselves again (os.execv) with other settings
    done = subprocess.run(
        [sys.executable, *argv[1:], "--help"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "300"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done.stdout if done.returncode == 0 and done.stdout else None


def test_marked_blocks_name_real_commands_and_flags() -> None:
    """A block that is not run still names real subcommands and flags: each ``ponder ...``
    and ``python -m experiments...``/``benchmarks...`` line of a marked block is checked
    against its ``--help`` (of the longest run of leading subcommand-like words that has one)."""
    helps: dict[tuple[str, ...], str | None] = {}
    wrong: list[str] = []
    checked = 0
    for found in all_blocks():
        if found.reason is None or found.lang != "bash":
            continue
        for line in re.sub(r"\\\n\s*", " ", found.text).splitlines():
            matched = COMMAND.match(line.partition(" #")[0].strip())
            if not matched:
                continue
            head = matched["head"].removeprefix(".venv/bin/").split()
            words = shlex.split(re.sub(r"\$\([^)]*\)|[<>&].*", "X", matched["rest"]))
            sub = list(itertools.takewhile(re.compile(r"[a-z][a-z0-9_-]*").fullmatch, words))
            base = ["ponder"] if head == ["ponder"] else ["python", "-m", head[-1]]
            for k in range(len(sub), -1, -1):
                key = (*base, *sub[:k])
                if key not in helps:
                    helps[key] = command_help(list(key))
                if (text := helps[key]) is not None:
                    break
            else:
                wrong.append(f"{found}: no --help for {line.strip()[:80]}")
                continue
            checked += 1
            flags = [w.partition("=")[0] for w in words if w.startswith("--")]
            unknown = [f for f in flags if not re.search(re.escape(f) + r"(?![\w-])", text)]
            if unknown:
                wrong.append(f"{found}: {' '.join(key)} has no {unknown}")
    assert not wrong, "\n".join(wrong)
    assert checked >= 20, checked


# -- running blocks -------------------------------------------------------------------------


@dataclass(frozen=True)
class Workdir:
    """Where blocks run: a temp folder with the checkout's ``.venv`` and ``examples/``."""

    path: Path
    env: dict[str, str]

    def bash(self, text: str, *, timeout_s: float = 600) -> str:
        """Run a block with bash; its stdout, after asserting it exited 0."""
        return self.run(["bash", "-euo", "pipefail", "-c", text], timeout_s)

    def python(self, text: str, *, timeout_s: float = 600) -> str:
        return self.run([sys.executable, "-c", text], timeout_s)

    def run(self, argv: list[str], timeout_s: float) -> str:
        """Run ``argv`` here; its stdout, after asserting it exited 0."""
        done = subprocess.run(
            argv, cwd=self.path, env=self.env, capture_output=True, text=True, timeout=timeout_s
        )
        assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done.stdout

    @contextlib.contextmanager
    def background(self, text: str) -> Iterator[subprocess.Popen[str]]:
        """A block that serves until stopped (its process group, at the end)."""
        process = popen_owned(
            ["bash", "-euo", "pipefail", "-c", text],
            cwd=self.path,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            yield process
        finally:
            stop_group(process)


@pytest.fixture
def workdir(tmp_path: Path) -> Workdir:
    home = tmp_path / "ponder-home"
    (home / "datasets").mkdir(parents=True)
    shutil.copy(ROOT / "examples" / "problems.jsonl", home / "datasets" / "gsm8k.jsonl")
    path = tmp_path / "clone"
    path.mkdir()
    for linked in (".venv", "examples"):
        (path / linked).symlink_to(ROOT / linked)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PONDER_")}
    env.update(
        PONDER_HOME=str(home),
        PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]]),
        COLUMNS="200",
    )
    return Workdir(path, env)


def on_port(text: str, ports: dict[str, int]) -> str:
    """``text`` with each ``host:port`` of ``ports`` (``8000`` alone: localhost's and
    127.0.0.1's) moved to 127.0.0.1 on the given port."""
    for where, port in ports.items():
        hosts = ("localhost:", "127.0.0.1:") if where.isdigit() else ("",)
        for host in hosts:
            text = text.replace(f"{host}{where}", f"127.0.0.1:{port}")
        if where.isdigit():
            text = re.sub(rf"--port {where}\b", f"--port {port}", text)
    return text


def answered(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def assert_no_error(output: str) -> None:
    assert output.strip(), "no output"
    assert '"error"' not in output, output


@contextlib.contextmanager
def embedded_names(engine: FakeEngineHandle | None = None) -> Iterator[str]:
    """Ponder on loopback serving the embedded default's models and aliases by name, each in
    front of one fake engine (``engine``, else a new one); yields its root URL."""
    with contextlib.ExitStack() as stack:
        if engine is None:
            engine = stack.enter_context(running_fake_engine())
        models = tuple(
            ModelConfig(
                name=name,
                engines=(engine.base_url,),
                engine_model=engine.config.model,
                aliases=dict(get_model(name).aliases),
                answer_format="lenient",
            )
            for name in EMBEDDED
        )
        with running_ponder(Settings(models=models)) as url:
            yield url


# -- README.md ------------------------------------------------------------------------------


def test_serving_section_as_pasted(workdir: Workdir) -> None:
    """``## Serving``: its ``ponder serve`` in front of an engine, then its curl, its SDK
    example and its Responses/Anthropic example against that server."""
    serve = block("README.md", ".venv/bin/ponder serve --engine")
    port = free_port()
    with running_fake_engine(FakeEngineConfig(model="my-model")) as engine:
        engine_port = int(engine.base_url.rsplit(":", 1)[1].split("/")[0])
        command = on_port(serve.text, {"8001": engine_port, "8000": port})
        url = f"http://127.0.0.1:{port}"
        with workdir.background(command) as process:
            assert wait_until(lambda: answered(url) or process.poll() is not None, within=300)
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            models = httpx.get(f"{url}/v1/models", headers={"Authorization": "Bearer sk-local"})
            ids = {m["id"] for m in models.json()["data"]}
            assert {"my-model", "my-model+gsr4", "my-model+rc3"} <= ids

            curl = block("README.md", "-H 'Authorization: Bearer sk-local'")
            streamed = workdir.bash(on_port(curl.text, {"8000": port}))
            assert_no_error(streamed)
            assert "data: [DONE]" in streamed and '"usage"' in streamed

            sdk = block("README.md", 'extra_body={"return_trace": True}')
            printed = workdir.python(on_port(sdk.text, {"8000": port}))
            assert "\\boxed{" in printed and "engine_calls=" in printed

            apis = block("README.md", "from anthropic import Anthropic")
            printed = workdir.python(on_port(apis.text, {"8000": port}))
            assert "['reasoning', 'message']" in printed and "'thinking'" in printed
        # four gsr(n=4) runs (curl, SDK, Responses, Messages): candidates, then a refinement
        assert engine.state.calls == 4 * 2 and engine.state.requests[0].body["n"] == 4
        assert all("sk-local" not in str(r.headers) for r in engine.state.requests)


def test_from_python_against_make_serve_s_names(workdir: Workdir) -> None:
    """``## From Python``: ``solve`` with an OpenAI-compatible engine, here Ponder serving the
    embedded default's names (``gsr(n=4)``: the candidates in one call of n=4, a refinement)."""
    example = block("README.md", "from scaffolds import solve")
    with running_fake_engine() as engine:
        with embedded_names(engine) as url:
            printed = workdir.python(on_port(example.text, {"8000": int(url.rsplit(":", 1)[1])}))
        assert engine.state.calls == 2 and engine.state.requests[0].body["n"] == 4
    answer, _, usage = printed.partition(" ")
    assert answer.strip() and "calls=2" in usage


def test_evaluating_scaffolds_as_pasted(workdir: Workdir) -> None:
    """``## Evaluating scaffolds``: a dataset made, three scaffolds run over gsm8k (the
    stand-in), and two runs compared. ``runs/gsm8k-new``, the run the block compares with, is
    made first by a one-scaffold run."""
    example = block("README.md", "ponder eval make-addition")
    with embedded_names() as url:
        port = int(url.rsplit(":", 1)[1])
        workdir.bash(
            f".venv/bin/ponder eval --base-url http://127.0.0.1:{port}/v1 "
            "--model smollm2-135m-instruct --dataset gsm8k --limit 2 --scaffold single "
            "--out runs/gsm8k-new"
        )
        printed = workdir.bash(on_port(example.text, {"8000": port}))
    assert (workdir.path / "runs" / "addition.jsonl").read_text().count("\n") == 200
    run = workdir.path / "runs" / "gsm8k"
    results = [json.loads(row) for row in (run / "results.jsonl").read_text().splitlines()]
    assert len(results) == 8 * 3 * 4, "8 problems (the stand-in), 3 scaffolds, 4 samples"
    assert [r["error"] for r in results if r.get("error")] == []
    report = (run / "report.json").read_text()
    assert "gsr(n=4)" in report and "rc(steps=3)" in report
    assert printed.strip()


# -- docker/, deploy/ -----------------------------------------------------------------------


def test_docker_compose_cpu_curl(workdir: Workdir) -> None:
    """docker/README.md's curl to the ``cpu`` profile's Ponder (here Ponder on loopback with
    the same model and aliases, in front of the fake engine)."""
    curl = block("docker/README.md", '"ponder-addition+maj8"')
    with embedded_names() as url:
        answer = workdir.bash(on_port(curl.text, {"8000": int(url.rsplit(":", 1)[1])}))
    assert_no_error(answer)
    assert json.loads(answer)["choices"][0]["message"]["content"]


def test_deploy_replicas_as_pasted(workdir: Workdir) -> None:
    """deploy/README.md: ``ponder serve`` over three engine replicas (fake engines on
    loopback for gpu-a/b/c:8000); its port from ``PONDER_PORT``, as the block gives none."""
    serve = block("deploy/README.md", "--engine http://gpu-a:8000/v1")
    port = free_port()
    config = FakeEngineConfig(model="Qwen/Qwen3-8B")
    with contextlib.ExitStack() as stack:
        engines = [stack.enter_context(running_fake_engine(config)) for _ in "abc"]
        ports = {
            f"gpu-{name}:8000": int(engine.base_url.rsplit(":", 1)[1].split("/")[0])
            for name, engine in zip("abc", engines, strict=True)
        }
        url = f"http://127.0.0.1:{port}"
        env = dict(workdir.env, PONDER_PORT=str(port))
        process = popen_owned(
            ["bash", "-euo", "pipefail", "-c", on_port(serve.text, ports)],
            cwd=workdir.path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            assert wait_until(lambda: answered(url) or process.poll() is not None, within=300)
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            ids = {m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]}
            assert "qwen3-8b" in ids
            for n in range(6):
                httpx.post(
                    f"{url}/v1/chat/completions",
                    json={"model": "qwen3-8b", "messages": [{"role": "user", "content": f"{n}"}]},
                    timeout=60,
                ).raise_for_status()
            assert httpx.get(f"{url}/ready").text.count("127.0.0.1") >= 3
        finally:
            stop_group(process)
        assert sum(engine.state.calls for engine in engines) == 6
        assert {r.body["model"] for e in engines for r in e.state.requests} == {"Qwen/Qwen3-8B"}


# -- training/, experiments/ ----------------------------------------------------------------


def test_training_data_as_pasted(workdir: Workdir) -> None:
    """training/README.md's ``ponder train data`` against Ponder serving the embedded names."""
    example = block("training/README.md", "ponder train data runs/gsr")
    with embedded_names() as url:
        workdir.bash(on_port(example.text, {"8000": int(url.rsplit(":", 1)[1])}))
    run = workdir.path / "runs" / "gsr"
    assert (run / "traces.jsonl").read_text().strip()
    assert (run / "data" / "sft.jsonl").exists()


@pytest.mark.timeout(600)  # the six SmolLM2 reports grade every candidate: ~20 s on an idle core
@pytest.mark.parametrize("holding", REPORTS.values(), ids=REPORTS.keys())
def test_experiment_reports_rebuild_as_pasted(workdir: Workdir, holding: str) -> None:
    """experiments/README.md's report commands, run in a copy of ``experiments/`` (they write
    beside the committed rows): each block exits 0, writes its reports again, and every
    ``.json`` and ``.md`` it writes is the committed file, byte for byte (the README's claim)."""
    copy = workdir.path / "experiments"
    shutil.copytree(ROOT / "experiments", copy, ignore=shutil.ignore_patterns("__pycache__"))
    started = time.time()
    workdir.bash(block("experiments/README.md", holding).text)
    written = [
        path
        for path in copy.rglob("*")
        if path.suffix in (".json", ".md", ".png") and path.stat().st_mtime >= started
    ]
    assert written, "the block wrote nothing"
    differ = [
        str(path.relative_to(workdir.path))
        for path in written
        if path.suffix != ".png"
        and path.read_bytes() != (ROOT / path.relative_to(workdir.path)).read_bytes()
    ]
    assert not differ, f"rebuilt, but not the committed bytes: {differ}"
