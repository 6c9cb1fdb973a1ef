"""``retain_freed_memory``: a training process runs again with glibc told to keep what it
frees, once, and never against its caller's own settings."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from training.common import MALLOC_RETAIN, retain_freed_memory

ROOT = Path(__file__).resolve().parents[2]
SHOW = """
import os, sys
from training.common import retain_freed_memory
print("started", flush=True)
retain_freed_memory([sys.executable, "-c", sys.argv[1], sys.argv[1]])
print({k: os.environ.get(k) for k in sorted(NAMES)})
""".replace("NAMES", repr(sorted(MALLOC_RETAIN)))


def run(env: dict[str, str]) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if k not in MALLOC_RETAIN}
    clean.pop("PONDER_MALLOC_RETAIN", None)
    out = subprocess.run(
        [sys.executable, "-c", SHOW, SHOW],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return out.stdout.splitlines()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's settings")
def test_the_process_runs_again_once_with_the_settings() -> None:
    lines = run({})
    assert lines[:2] == ["started", "started"]  # the exec'd run started once more, no loop
    assert lines[2] == str({k: MALLOC_RETAIN[k] for k in sorted(MALLOC_RETAIN)})


def test_a_callers_own_setting_or_opting_out_leaves_the_process_alone() -> None:
    for env in ({"MALLOC_ARENA_MAX": "4"}, {"PONDER_MALLOC_RETAIN": "0"}):
        lines = run(env)
        assert lines[0] == "started" and len(lines) == 2
        assert "'MALLOC_MMAP_MAX_': None" in lines[1]


def test_it_never_execs_when_told_not_to(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PONDER_MALLOC_RETAIN", "0")
    monkeypatch.setattr(os, "execve", lambda *a: pytest.fail("exec'd"))
    retain_freed_memory(["python"])
