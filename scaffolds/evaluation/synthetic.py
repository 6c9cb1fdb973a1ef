"""Synthetic verifiable tasks, fixed by a seed.

- 3-digit addition (``347+589=`` -> ``936``): the task the project's tiny trained model
  learns; handy for smoke-testing a whole eval pipeline without any real dataset.
- Short arithmetic questions in English (``What is 7 + 15?`` -> ``22``): one- and
  two-digit operands, ``+ - *``, one or two operations; where a small real instruct model
  (SmolLM2-135M) is neither always right nor always wrong, so scaffold effects show.

>>> addition_problems(2, seed=0)[0]
{'id': 'add-0-00000', 'problem': '964+494=', 'answer': '1458', 'source': 'synthetic-addition'}
>>> arithmetic_problems(1, seed=0)[0]["problem"]
'What is 34 - 66 + 63? Give the final answer as a number.'
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

__all__ = ["addition_problems", "arithmetic_problems", "write_addition", "write_rows"]


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


_OPERATIONS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def _operand(rng: random.Random, op: str) -> int:
    return rng.randint(2, 12) if op == "*" else rng.randint(1, 99)


def arithmetic_problems(count: int, *, seed: int = 0) -> list[dict[str, Any]]:
    """``count`` short English arithmetic questions: ``a op b`` (two thirds of them) or
    ``a op b op c`` (evaluated left to right, bracketed where precedence would differ),
    reproducible by seed."""
    if count < 0:
        raise ValueError(f"count must be >= 0 (got {count})")
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        ops = [rng.choice("+-*") for _ in range(1 if rng.random() < 2 / 3 else 2)]
        value = _operand(rng, ops[0])
        text = str(value)
        for i, op in enumerate(ops):
            operand = _operand(rng, op)
            value = _OPERATIONS[op](value, operand)
            sum_first = i > 0 and op == "*" and ops[i - 1] != "*"  # left to right, as written
            text = f"({text}) {op} {operand}" if sum_first else f"{text} {op} {operand}"
        rows.append(
            {
                "id": f"arith-{seed}-{index:05d}",
                "problem": f"What is {text}? Give the final answer as a number.",
                "answer": str(value),
                "source": "synthetic-arithmetic",
            }
        )
    return rows


def write_rows(path: Path, rows: list[dict[str, Any]]) -> int:
    """Write ``rows`` to ``path`` as JSONL; returns the row count."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")
    return len(rows)


def write_addition(path: Path, count: int, *, seed: int = 0) -> int:
    """Write :func:`addition_problems` to ``path`` as JSONL; returns the row count."""
    return write_rows(path, addition_problems(count, seed=seed))
