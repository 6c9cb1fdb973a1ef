"""Running the server image's own command outside a container.

:func:`build_image_site` installs Ponder as the image does (a wheel of the files the
builder stage copies); :func:`image_environment` and :func:`running_image_command` run
the image's ENTRYPOINT/CMD with its ENV on that install.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx

from scaffolds.engines.vllm_server import ROOT
from scaffolds.processes.children import owned_process
from tests.deploy.artifacts import final_stage, image_command, parse_dockerfile

VENV_IN_IMAGE = "/opt/venv/bin"


def _copy_as_docker(source: Path, dest: Path, dest_is_dir: bool) -> None:
    """``COPY source dest``: a directory's contents go to dest; a file into or onto it."""
    if source.is_dir():
        shutil.copytree(
            source,
            dest,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
    else:
        target = dest / source.name if dest_is_dir else dest
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


def installed_source_dir() -> str:
    """The path the builder stage pip-installs Ponder from (``pip ... install --no-deps X``)."""
    for run in parse_dockerfile()[0].all("RUN"):
        found = re.search(r"install --no-deps (\S+)", run.args)
        if found:
            return found.group(1)
    raise AssertionError("the builder stage installs no project directory")


def build_image_site(workdir: Path) -> Path:
    """What the image's venv imports Ponder from: its wheel, built from the files the
    builder stage COPYs into the install directory (kept in ``workdir/src``), unpacked
    into ``workdir/site``."""
    src_in_image = installed_source_dir()
    src = workdir / "src"
    for copy in parse_dockerfile()[0].all("COPY"):
        *sources, dest = shlex.split(copy.args)
        if "from" in copy.flags or not dest.startswith(src_in_image):
            continue
        target = src / dest.removeprefix(src_in_image).strip("/")
        for source in sources:
            _copy_as_docker(ROOT / source, target, dest.endswith("/"))
    wheels = workdir / "wheels"
    build = f"from setuptools import build_meta; build_meta.build_wheel({str(wheels)!r})"
    subprocess.run(
        [sys.executable, "-c", build],
        cwd=src,
        check=True,
        capture_output=True,
    )
    site = workdir / "site"
    (wheel,) = wheels.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    return site


def image_environment(site: Path, **deployment: str) -> dict[str, str]:
    """The process environment the image gives its command, here: the Dockerfile's ENV
    (its venv on PATH mapped to this interpreter's), no inherited ``PONDER_*``, the
    image's code first on the import path, then what a deployment adds."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PONDER_")}
    here = str(Path(sys.executable).parent)
    for name, value in final_stage().env().items():
        if name == "PATH":
            value = value.replace(VENV_IN_IMAGE, here).replace("$PATH", os.environ["PATH"])
        env[name] = value
    env["PYTHONPATH"] = str(site)
    env.update(deployment)
    return env


@contextlib.contextmanager
def running_image_command(
    env: dict[str, str], port: int, workdir: Path, log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """The image's ENTRYPOINT + CMD as a process, until ``/health`` answers; stopped on exit."""
    argv = image_command()
    executable = shutil.which(argv[0], path=env["PATH"])
    assert executable, f"{argv[0]!r} is not on the image's PATH"
    with (
        log.open("wb") as out,
        owned_process(
            [executable, *argv[1:]], env=env, cwd=workdir, stdout=out, stderr=subprocess.STDOUT
        ) as process,
    ):
        deadline = time.monotonic() + 300
        while True:
            if process.poll() is not None:
                raise AssertionError(f"exited with {process.returncode}:\n{log.read_text()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            assert time.monotonic() < deadline, f"no /health after 300 s:\n{log.read_text()}"
            time.sleep(0.1)
        yield process


def healthcheck_exit_code(env: dict[str, str]) -> int:
    """Run the image's HEALTHCHECK command as Docker would; its exit code."""
    healthcheck = final_stage().last("HEALTHCHECK")
    assert healthcheck is not None
    argv = healthcheck.exec_form()
    executable = shutil.which(argv[0], path=env["PATH"])
    assert executable
    return subprocess.run([executable, *argv[1:]], env=env, capture_output=True).returncode


def wait_ready(base: str, timeout_s: float = 120.0) -> None:
    """Wait until ``{base}/ready`` is 200 (its engines answer and the answer pool, which
    warms in the background after start, is no longer warming)."""
    deadline = time.monotonic() + timeout_s
    while (ready := httpx.get(f"{base}/ready", timeout=10)).status_code != 200:
        assert time.monotonic() < deadline, f"never ready: {ready.text}"
        time.sleep(0.1)
