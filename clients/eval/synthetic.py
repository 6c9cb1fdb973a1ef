"""A synthetic verifiable task: 3-digit addition (``347+589=`` -> ``936``).

The same task the project's tiny trained model learns; handy for smoke-testing a whole
eval pipeline without any real dataset.

>>> addition_problems(2, seed=0)[0]
{'id': 'add-0-00000', 'problem': '964+494=', 'answer': '1458', 'source': 'synthetic-addition'}
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

__all__ = ["addition_problems", "write_addition"]


def addition_problems(count: int, *, seed: int = 0) -> list[dict[str, Any]]:
    """``count`` problems ``a+b=`` with a, b uniform in 100..999, reproducible by seed."""
    if count < 0:
        raise ValueError(f"count must be >= 0 (got {count})")
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        rows.append(
            {
                "id": f"add-{seed}-{index:05d}",
                "problem": f"{a}+{b}=",
                "answer": str(a + b),
                "source": "synthetic-addition",
            }
        )
    return rows


def write_addition(path: Path, count: int, *, seed: int = 0) -> int:
    """Write :func:`addition_problems` to ``path`` as JSONL; returns the row count."""
    rows = addition_problems(count, seed=seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    return len(rows)
