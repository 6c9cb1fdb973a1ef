"""The server image (docker/Dockerfile), checked without a Docker engine.

The image's own command and environment, read from the Dockerfile, are run here against
a fake engine, on the code exactly as the image installs it: a wheel built from the files
the builder stage copies. A missing package-data file, a renamed setting or a broken
entry point fails here as it would in the container.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import httpx
import pytest
from packaging.requirements import Requirement

from scaffolds.engines.vllm_server import ROOT, free_port
from server.settings import Settings
from testing.fake_engine import running_fake_engine
from tests.deploy.artifacts import (
    DOCKER_DIR,
    DOCKERFILE,
    LOCK_FILE,
    final_stage,
    image_command,
    image_ponder_env,
    parse_dockerfile,
)
from tests.deploy.image_run import (
    build_image_site,
    healthcheck_exit_code,
    image_environment,
    running_image_command,
    wait_ready,
)

CLIENT_KEY = "sk-deploy-test"


@pytest.fixture(scope="module")
def image_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The image's installed Ponder (see :func:`build_image_site`), built once per module."""
    return build_image_site(tmp_path_factory.mktemp("image"))


def test_image_command_serves_a_fake_engine(image_site: Path, tmp_path: Path) -> None:
    port = free_port()
    with running_fake_engine() as engine:
        env = image_environment(
            image_site,
            PONDER_ENGINES=engine.base_url,
            PONDER_MODEL=engine.config.model,
            PONDER_API_KEYS=CLIENT_KEY,
            # The image listens on 0.0.0.0:8000; here, on loopback and a free port.
            PONDER_HOST="127.0.0.1",
            PONDER_PORT=str(port),
        )
        probe = subprocess.run(
            [sys.executable, "-c", "import server; print(server.__file__)"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=True,
        )
        assert probe.stdout.startswith(str(image_site)), (
            "the test would run the checkout, not the wheel"
        )

        with running_image_command(env, port, tmp_path, tmp_path / "ponder.log") as process:
            base = f"http://127.0.0.1:{port}"
            wait_ready(base)
            body = {
                "model": engine.config.model,
                "messages": [{"role": "user", "content": "What is 2+2?"}],
                "scaffold": "majority(k=2)",
            }
            assert httpx.post(f"{base}/v1/chat/completions", json=body).status_code == 401
            reply = httpx.post(
                f"{base}/v1/chat/completions",
                json=body,
                headers={"Authorization": f"Bearer {CLIENT_KEY}"},
                timeout=30,
            )
            assert reply.status_code == 200, reply.text
            assert reply.json()["choices"][0]["message"]["content"]
            assert healthcheck_exit_code(env) == 0

            process.send_signal(signal.SIGTERM)  # what `docker stop` sends
            # uvicorn shuts down cleanly, then re-raises the signal (exit status 143).
            assert process.wait(timeout=20) in (0, -signal.SIGTERM)
            assert "Application shutdown complete" in (tmp_path / "ponder.log").read_text()
        assert healthcheck_exit_code(env) != 0, "the HEALTHCHECK passes with no server"


def test_image_holds_every_file_of_the_server_packages(image_site: Path) -> None:
    sent = image_site.parent / "src"
    wanted = {
        path.relative_to(sent)
        for package in ("scaffolds", "server", "clients")
        for path in (sent / package).rglob("*")
        if path.is_file()
    } | {path.relative_to(sent) for path in (sent / "training").rglob("*.py")}
    installed = {path.relative_to(image_site) for path in image_site.rglob("*") if path.is_file()}
    missing = sorted(str(path) for path in wanted - installed)
    assert not missing, f"the build sends these but the install drops them: {missing}"


def test_image_environment_is_valid_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    env = image_ponder_env()
    fields = {f"PONDER_{name.upper()}" for name in Settings.model_fields}
    assert env and set(env) <= fields, sorted(set(env) - fields)
    for name in [n for n in os.environ if n.startswith("PONDER_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = Settings(model="m", engines=("http://engine:8000/v1",))
    assert settings.host == "0.0.0.0", "a container must listen on every interface"
    exposed = {int(p.split("/")[0]) for i in final_stage().all("EXPOSE") for p in i.args.split()}
    assert exposed == {settings.port}


def test_final_stage_is_small_and_unprivileged() -> None:
    stages = parse_dockerfile()
    assert len(stages) >= 2, "multi-stage: the final stage only copies the built venv"
    final = stages[-1]
    assert "slim" in final.base and final.base.startswith("python:"), final.base
    user = final.last("USER")
    assert user is not None and user.args.split(":")[0].isdigit(), "a numeric non-root USER"
    assert int(user.args.split(":")[0]) != 0
    for copy in final.all("COPY"):
        assert copy.flags.get("from") == stages[0].name, f"final stage copies {copy.args}"
    for run in final.all("RUN"):
        assert not re.search(r"\b(apt-get|apk|pip|gcc|make|curl|wget)\b", run.args), run.args
    healthcheck = final.last("HEALTHCHECK")
    assert healthcheck is not None and "/health" in " ".join(healthcheck.exec_form())
    assert image_command()[:2] == ["ponder", "serve"]


def test_dockerfile_builds_offline_with_an_optional_ca_secret() -> None:
    text = DOCKERFILE.read_text()
    assert not re.match(r"\s*#\s*syntax\s*=", text, re.IGNORECASE), (
        "a syntax directive makes BuildKit fetch its frontend from a registry"
    )
    stages = parse_dockerfile()
    assert all(stage.base == stages[0].base for stage in stages), "one base, BASE_IMAGE"
    assert re.search(r"^FROM \$\{BASE_IMAGE\}", text, re.MULTILINE)
    downloads = [run for run in stages[0].all("RUN") if "venv-pip install" in run.args]
    assert len(downloads) == 2, "the lock's install and Ponder's (its build backend)"
    for run in downloads:
        kinds = {(m.get("type"), m.get("id") or m.get("target")) for m in run.mounts}
        assert {("secret", "extra-ca"), ("tmpfs", "/run/ca")} <= kinds, run.args
    for run in [*stages[0].all("RUN"), *stages[-1].all("RUN")]:
        if run not in downloads:
            assert not run.mounts, f"only the download steps see the secret: {run.args}"
    helper = (DOCKER_DIR / "venv-pip.sh").read_text()
    assert "/run/secrets/extra-ca" in helper and "/run/ca/" in helper
    assert "!docker/venv-pip.sh" in (DOCKER_DIR / "Dockerfile.dockerignore").read_text()


def _locked_pins() -> dict[str, tuple[str, int]]:
    """Name -> (pinned version, number of hashes) from docker/requirements.lock."""
    text = re.sub(r"\\\n", " ", LOCK_FILE.read_text())
    pins: dict[str, tuple[str, int]] = {}
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        requirement = Requirement(line.split(" --hash", 1)[0])
        (spec,) = requirement.specifier
        assert spec.operator == "==", f"{requirement} is not pinned"
        pins[requirement.name.lower().replace("_", "-")] = (spec.version, line.count("--hash="))
    return pins


def test_lock_pins_every_server_dependency_with_hashes() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = _locked_pins()
    wanted = project["dependencies"] + project["optional-dependencies"]["server"]
    for line in wanted:
        requirement = Requirement(line)
        name = requirement.name.lower().replace("_", "-")
        assert name in pins, f"{name} is not in {LOCK_FILE.name}: regenerate it (docker/README.md)"
        assert requirement.specifier.contains(pins[name][0]), (
            f"{LOCK_FILE.name} pins {name}=={pins[name][0]}, pyproject wants {requirement}"
        )
    assert all(hashes for _, hashes in pins.values()), "every pin needs --hash lines"
    assert not {"torch", "transformers"} & set(pins), "the server image must not pull torch"
