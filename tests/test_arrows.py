"""Dependencies point down: every import of every package module, at any depth, checked.

``scaffolds`` imports none of the others; ``server`` nothing of ``training`` or
``clients``; ``training`` nothing of ``server`` or ``clients``; ``clients.eval`` nothing
of ``server`` or ``training``. The ``ponder`` command (``clients/cli.py``) names its
subcommands' apps by string and imports them only when one runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FORBIDDEN = {
    "scaffolds": ("server", "clients", "training"),
    "server": ("training", "clients"),
    "training": ("server", "clients"),
    "clients/eval": ("server", "training"),
    "clients/cli.py": ("server", "training"),
}

PENDING = {
    # Moves with server/vllm_process.py to the testing package (issue 17, another branch).
    ("training/demo/check_vllm.py", "server.vllm_process"),
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


@pytest.mark.parametrize("where", sorted(FORBIDDEN))
def test_imports_point_down(where: str) -> None:
    base = ROOT / where
    files = [base] if base.suffix == ".py" else sorted(base.rglob("*.py"))
    bad = []
    for path in files:
        relative = path.relative_to(ROOT).as_posix()
        for module in sorted(_imports(path)):
            top = module.split(".")[0]
            if top in FORBIDDEN[where] and (relative, module) not in PENDING:
                bad.append(f"{relative} imports {module}")
    assert not bad, "\n".join(bad)
