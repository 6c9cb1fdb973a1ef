"""Run the real ``ponder`` command in a subprocess, as a user's shell would.

``run_ponder(args)`` runs this venv's ``ponder`` script with the worktree first on the
path, stdout and stderr piped (not a terminal, no ``COLUMNS``), and returns the finished
process. ``missing=("trl",)`` makes those modules unimportable in it, as in an
environment without the extra that brings them: a ``sitecustomize.py`` on its path puts
a finder first on ``sys.meta_path`` that raises ``ModuleNotFoundError`` for them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from scaffolds.processes.children import owned_process

ROOT = Path(__file__).resolve().parents[1]
PONDER = Path(sys.executable).with_name("ponder")

_MISSING = '''
import os
import sys

_MISSING = frozenset(os.environ["PONDER_TEST_MISSING"].split(","))


class _Missing:
    """Finds nothing for the missing modules: importing one (or a submodule) fails."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in _MISSING:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _Missing())
'''


def run_ponder(
    args: Sequence[str],
    *,
    missing: Sequence[str] = (),
    cwd: Path = ROOT,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 600.0,
) -> subprocess.CompletedProcess[str]:
    """``ponder ARGS`` run to its end, with ``missing`` modules unimportable."""
    environ = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    with tempfile.TemporaryDirectory(prefix="ponder-site-") as site:
        path = [str(ROOT)]
        if missing:
            Path(site, "sitecustomize.py").write_text(_MISSING, encoding="utf-8")
            path.append(site)
            environ["PONDER_TEST_MISSING"] = ",".join(missing)
        environ["PYTHONPATH"] = os.pathsep.join(path)
        environ.update(env or {})
        command = [str(PONDER), *args]
        with owned_process(
            command,
            cwd=cwd,
            env=environ,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as process:
            out, err = process.communicate(timeout=timeout_s)
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def error_line(done: subprocess.CompletedProcess[str], code: int) -> str:
    """The last line ``done`` wrote to stderr, after checking that it exited ``code`` and
    printed no traceback (a command's error is one line, never a stack)."""
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == code, done.stderr
    return done.stderr.splitlines()[-1]
