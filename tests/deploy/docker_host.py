"""A Docker engine on this machine for the image tests, and the offline base image.

- :func:`docker_engine`: the Docker daemon already running (``DOCKER_HOST`` or the
  default socket), else ``dockerd`` from Debian's ``docker.io`` (installed with apt-get
  when missing) started here: owned by this process (its own session, stopped as a
  group, dead with its parent) and stopped afterwards together with its containerd.
- :func:`debian_base`: the base image made from Debian's packages with debootstrap
  (no registry needed), kept as a tarball under ``~/.cache/ponder/docker`` and imported
  again whenever the daemon lacks it.
- :func:`build_image`: ``make image`` (BuildKit), timed, with its cached steps counted.

Where Docker cannot run at all these raise :class:`DockerUnavailable`; the tests then
skip, or fail under ``PONDER_REQUIRE_DEPLOY_TOOLS=1`` (CI).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from scaffolds.engines.vllm_server import ROOT
from scaffolds.processes.children import owned_process

CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ponder" / "docker"
DEFAULT_SOCKET = Path("/var/run/docker.sock")
DAEMON_MARKER = "PONDER_TEST_DOCKERD"
"""Set in the environment of a dockerd started here: containerd and its shims inherit it,
so whatever of them outlives the daemon can be found and stopped."""

# The base: Debian's own Python (bookworm's is 3.11, the Dockerfile's PYTHON_VERSION).
SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "python3-pip", "python-is-python3", "ca-certificates")
BASE_CHANGES = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    'CMD ["python3"]',
)
FALLBACK_MIRROR = "http://deb.debian.org/debian"

REPORT: list[str] = []
"""Lines about the image (size, build time) for the end of the test session's output."""


class DockerUnavailable(Exception):
    """Docker cannot run here (no engine, no way to install or start one)."""


def _tail(text: str | bytes, lines: int = 30) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return "\n".join(text.strip().splitlines()[-lines:])


def _as_root(argv: Sequence[str]) -> list[str]:
    if os.geteuid() == 0:
        return list(argv)
    if shutil.which("sudo"):
        return ["sudo", "-n", *argv]
    raise DockerUnavailable(f"`{' '.join(argv)}` needs root, and there is no sudo")


def apt_install(*packages: str) -> None:
    """Install Debian packages (apt-get update first), as ``make browser`` does."""
    if not shutil.which("apt-get"):
        raise DockerUnavailable(f"{', '.join(packages)} missing and no apt-get to install them")
    noninteractive = ["env", "DEBIAN_FRONTEND=noninteractive"]
    for argv in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
    ):
        result = subprocess.run(
            _as_root([*noninteractive, *argv]), capture_output=True, text=True, timeout=900
        )
        if result.returncode != 0:
            raise DockerUnavailable(f"`{' '.join(argv)}` failed:\n{_tail(result.stderr)}")


def _client_major(cli: str) -> int | None:
    result = subprocess.run(
        [cli, "version", "--format", "{{.Client.Version}}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    found = re.match(r"(\d+)\.", result.stdout.strip())
    return int(found.group(1)) if found else None


def buildkit_cli() -> str:
    """A docker CLI that builds with BuildKit: the first with the buildx plugin, else one
    from before Docker 23 (BuildKit built in; Debian bookworm's ``docker.io``)."""
    candidates = [c for c in dict.fromkeys([shutil.which("docker"), "/usr/bin/docker"]) if c]
    candidates = [c for c in candidates if Path(c).exists()]
    for cli in candidates:
        buildx = subprocess.run([cli, "buildx", "version"], capture_output=True, timeout=30)
        if buildx.returncode == 0:
            return cli
    for cli in candidates:
        major = _client_major(cli)
        if major is not None and major < 23:
            return cli
    raise DockerUnavailable(
        f"no docker CLI here builds with BuildKit (tried {candidates}): "
        "install the buildx plugin, or Debian's docker.io"
    )


@dataclass(frozen=True)
class Docker:
    """A reachable Docker daemon and the CLI that drives it."""

    cli: str
    env: dict[str, str]
    started_here: bool

    def run(
        self, *args: str, timeout: float = 300, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """``docker ARGS``; raises AssertionError (with its output) when it fails and
        ``check`` is set."""
        result = subprocess.run(
            [self.cli, *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"docker {' '.join(args)} exited {result.returncode}:\n"
                f"{_tail(result.stdout)}\n{_tail(result.stderr)}"
            )
        return result

    def answers(self) -> bool:
        with contextlib.suppress(subprocess.TimeoutExpired):
            return (
                self.run(
                    "info", "--format", "{{.ServerVersion}}", timeout=20, check=False
                ).returncode
                == 0
            )
        return False

    def has_image(self, tag: str) -> bool:
        return self.run("image", "inspect", tag, check=False).returncode == 0


def _processes_marked(marker: str) -> list[int]:
    """Live processes whose environment has ``DAEMON_MARKER=marker``."""
    wanted = f"{DAEMON_MARKER}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if wanted not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if state != "Z":
            found.append(int(entry.name))
    return found


def _stop_marked(marker: str, grace_s: float = 20.0) -> None:
    """What the daemon started and left behind (containerd, shims): SIGTERM, then SIGKILL."""
    deadline = time.monotonic() + grace_s
    signalled = False
    while (left := _processes_marked(marker)) and time.monotonic() < deadline:
        if not signalled:
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            signalled = True
        time.sleep(0.2)
    for pid in _processes_marked(marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _any_cli() -> str | None:
    found = shutil.which("docker")
    return found or ("/usr/bin/docker" if Path("/usr/bin/docker").exists() else None)


@contextlib.contextmanager
def docker_engine(log: Path, start_timeout: float = 120) -> Iterator[Docker]:
    """A Docker daemon for the block: the running one, else one started here and stopped
    afterwards. Raises :class:`DockerUnavailable` where none can run."""
    env = {**os.environ, "DOCKER_BUILDKIT": "1"}
    cli = _any_cli()
    running = cli is not None and Docker(cli, env, started_here=False).answers()
    if not running and not shutil.which("dockerd"):
        apt_install("docker.io")
    try:
        cli = buildkit_cli()
    except DockerUnavailable:
        if Path("/usr/bin/docker").exists():
            raise
        apt_install("docker.io")  # Debian's client builds with BuildKit
        cli = buildkit_cli()
    docker = Docker(cli, env, started_here=False)
    if docker.answers():  # already running, or the package's service started it
        yield docker
        return
    if os.environ.get("DOCKER_HOST"):
        raise DockerUnavailable(f"DOCKER_HOST={os.environ['DOCKER_HOST']} does not answer")
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        raise DockerUnavailable("dockerd is missing after installing docker.io")
    if os.geteuid() != 0:
        raise DockerUnavailable("no Docker daemon is running, and starting dockerd needs root")
    marker = uuid.uuid4().hex
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        with (
            log.open("wb") as out,
            owned_process(
                [dockerd, "--host", f"unix://{DEFAULT_SOCKET}"],
                env={**os.environ, DAEMON_MARKER: marker},
                stdout=out,
                stderr=subprocess.STDOUT,
                grace_s=60,
            ) as process,
        ):
            docker = Docker(cli, env, started_here=True)
            deadline = time.monotonic() + start_timeout
            while not docker.answers():
                if process.poll() is not None or time.monotonic() > deadline:
                    why = (
                        f"exited with {process.returncode}"
                        if process.poll() is not None
                        else (f"no answer after {start_timeout:.0f} s")
                    )
                    raise DockerUnavailable(
                        f"dockerd {why}; its log ({log}):\n{_tail(log.read_bytes())}"
                    )
                time.sleep(0.5)
            yield docker
    finally:
        _stop_marked(marker)


# -- the base image --------------------------------------------------------------------


def debian_mirror(apt: Path = Path("/etc/apt")) -> str:
    """The Debian mirror apt already uses for ``SUITE`` (sources.list or deb822 files)."""
    files = [apt / "sources.list", *sorted((apt / "sources.list.d").glob("*"))]
    for path in files:
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(
                    (k.strip().lower(), v.strip())
                    for k, _, v in (line.partition(":") for line in stanza.splitlines())
                    if not k.startswith("#") and v
                )
                if SUITE in fields.get("suites", "").split() and "deb" in fields.get("types", ""):
                    return fields["uris"].split()[0]
        elif path.suffix == ".list":
            for line in text.splitlines():
                parts = re.sub(r"\[[^]]*\]", "", line).split()
                if len(parts) >= 3 and parts[0] == "deb" and parts[2] == SUITE:
                    return parts[1]
    return FALLBACK_MIRROR


def base_tag() -> str:
    """The base image's tag; it names the recipe, so a changed recipe makes a new one."""
    recipe = "|".join([SUITE, "minbase", *BASE_PACKAGES, *BASE_CHANGES])
    return f"ponder-debian-base:{SUITE}-{hashlib.sha256(recipe.encode()).hexdigest()[:10]}"


def _bootstrap(tarball: Path) -> None:
    """debootstrap the base into a directory, strip apt's downloads, tar it up."""
    if not shutil.which("debootstrap"):
        apt_install("debootstrap")
    if os.geteuid() != 0:
        raise DockerUnavailable("making the base image with debootstrap needs root")
    rootfs = tarball.with_name(f"{tarball.stem}.rootfs-{os.getpid()}")
    shutil.rmtree(rootfs, ignore_errors=True)
    try:
        command = [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(BASE_PACKAGES)}",
            SUITE,
            str(rootfs),
            debian_mirror(),
        ]
        result = subprocess.run(command, capture_output=True, text=True, timeout=1800)
        if result.returncode != 0:
            raise AssertionError(f"{' '.join(command)} failed:\n{_tail(result.stdout)}")
        for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for path in (rootfs / leftover).glob("*"):
                if path.is_file():
                    path.unlink()
        partial = tarball.with_suffix(".partial")
        subprocess.run(
            ["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(partial), "."],
            check=True,
            timeout=600,
        )
        partial.rename(tarball)
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)


def debian_base(docker: Docker) -> tuple[str, str]:
    """The base image's tag, made if the daemon lacks it; and what it took: ``present``,
    ``imported`` (from the cached tarball) or ``bootstrapped``."""
    tag = base_tag()
    if docker.has_image(tag):
        return tag, "present"
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    tarball = CACHE_DIR / f"{tag.replace(':', '-')}.tar"
    how = "imported"
    if not tarball.exists():
        _bootstrap(tarball)
        how = "bootstrapped"
    changes = [arg for change in BASE_CHANGES for arg in ("--change", change)]
    docker.run("import", *changes, str(tarball), tag, timeout=600)
    return tag, how


# -- building --------------------------------------------------------------------------


@dataclass(frozen=True)
class Build:
    tag: str
    seconds: float
    steps: int
    cached: int
    log: str


def build_image(
    docker: Docker, tag: str, *, base: str, extra_ca: Path | None, flags: Sequence[str] = ()
) -> Build:
    """``make image`` with BuildKit from ``base``, ``extra_ca`` as the build secret."""
    make = shutil.which("make")
    if make is None:
        raise AssertionError("make is missing: the image is built with `make image`")
    command = [
        make,
        "--no-print-directory",
        "image",
        f"DOCKER={docker.cli}",
        f"IMAGE={tag}",
        f"BASE_IMAGE={base}",
        f"EXTRA_CA={extra_ca or ''}",
        f"DOCKER_BUILD_FLAGS={' '.join(['--progress=plain', *flags])}",
    ]
    started = time.monotonic()
    result = subprocess.run(
        command, cwd=ROOT, env=docker.env, capture_output=True, text=True, timeout=1800
    )
    seconds = time.monotonic() - started
    log = result.stdout + result.stderr
    if result.returncode != 0:
        raise AssertionError(f"the image build failed ({' '.join(command)}):\n{_tail(log, 60)}")
    steps = {m.group(1) for m in re.finditer(r"^#(\d+) \[(?!internal)", log, re.MULTILINE)}
    cached = {m.group(1) for m in re.finditer(r"^#(\d+) CACHED", log, re.MULTILINE)}
    return Build(tag, seconds, len(steps), len(cached & steps), log)


def image_size(docker: Docker, tag: str) -> int:
    return int(docker.run("image", "inspect", "--format", "{{.Size}}", tag).stdout.strip())


def saved_image_contains(docker: Docker, tag: str, needle: bytes) -> bool:
    """Whether ``needle`` occurs anywhere in ``docker save TAG``: every layer (files that
    a later layer deletes included) and the image's config and history."""
    process = subprocess.Popen([docker.cli, "save", tag], env=docker.env, stdout=subprocess.PIPE)
    assert process.stdout is not None
    found, tail = False, b""
    with process.stdout:
        while chunk := process.stdout.read(1 << 20):
            if needle in tail + chunk:
                found = True
            tail = chunk[-len(needle) :]
    assert process.wait(timeout=120) == 0, f"docker save {tag} failed"
    return found


# -- running ---------------------------------------------------------------------------


@contextlib.contextmanager
def running_container(
    docker: Docker, image: str, *, env: dict[str, str], port: int, args: Sequence[str] = ()
) -> Iterator[str]:
    """``docker run -d`` the image on the host's network with ``env`` until its
    ``/health`` answers on loopback ``port``; yields the container's name, removed on exit."""
    name = f"ponder-test-{uuid.uuid4().hex[:12]}"
    settings = [arg for key, value in env.items() for arg in ("-e", f"{key}={value}")]
    docker.run("run", "-d", "--name", name, "--network", "host", *args, *settings, image)
    try:
        deadline = time.monotonic() + 120
        while True:
            state = docker.run("inspect", "--format", "{{.State.Status}}", name).stdout.strip()
            assert state in ("created", "running"), (
                f"container {state}:\n{container_log(docker, name)}"
            )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, (
                f"no /health after 120 s:\n{container_log(docker, name)}"
            )
            time.sleep(0.2)
        yield name
    finally:
        docker.run("rm", "-f", name, check=False)


def container_log(docker: Docker, name: str) -> str:
    result = docker.run("logs", name, check=False)
    return _tail(result.stdout + result.stderr, 60)
