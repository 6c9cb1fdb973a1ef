"""Run a check module in another Python environment and read back its JSON report.

Engines and trainers that must not enter Ponder's environment (vLLM, verl) are checked
by a module that runs under their own interpreter with this checkout on ``PYTHONPATH``
and prints one ``REPORT {json}`` line; the pytest side asserts on the parsed report.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from scaffolds.processes.children import owned_process

ROOT = Path(__file__).resolve().parents[1]


def child_report(
    python: Path,
    module: str,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 600,
) -> tuple[dict[str, Any], int]:
    """``python -m module args...`` from the repository root; its last ``REPORT`` line
    parsed, and its exit status. Fails the test, with the child's output, without one."""
    with owned_process(
        [str(python), "-m", module, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as child:  # its whole group (vLLM's EngineCore, Ray) goes when the check ends
        stdout, stderr = child.communicate(timeout=timeout)
    done = subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)
    lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert lines, f"no report (exit {done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return dict(json.loads(lines[-1].removeprefix("REPORT "))), done.returncode
