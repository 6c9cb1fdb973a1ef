"""The synthetic task: three-digit addition, written the way the compact prompt set reads it.

A problem is ``"347+589="`` and its answer is ``"936"``. Every ordered pair of
three-digit numbers belongs to exactly one split, decided by a hash of the pair, so the
train, validation and test splits can never overlap, whatever seed or size is asked for.

>>> p = AdditionProblem(347, 589)
>>> p.problem, p.answer, p.id
('347+589=', '936', 'add-347-589')
>>> split_of(347, 589) in SPLITS
True
>>> [q.problem for q in problems("test", 2)] == [q.problem for q in problems("test", 2)]
True
>>> parse_problem("347+589=")
AdditionProblem(a=347, b=589)
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Split = Literal["train", "validation", "test"]
SPLITS: tuple[Split, ...] = ("train", "validation", "test")
LOW, HIGH = 100, 999
"""Operands are three-digit numbers: 100..999 inclusive (810,000 ordered pairs)."""

# Out of 1,000 hash buckets: 20 go to test, 20 to validation, the rest to train
# (about 16,200 test pairs, 16,200 validation pairs and 777,600 train pairs).
_TEST_BUCKETS = range(0, 20)
_VALIDATION_BUCKETS = range(20, 40)
# Each split draws from its own seed stream, so "test" with seed 0 and "train" with
# seed 0 are not the same walk through the pairs.
_SPLIT_SALT = {"train": 0, "validation": 1_000_003, "test": 2_000_029}


@dataclass(frozen=True, slots=True)
class AdditionProblem:
    a: int
    b: int

    @property
    def problem(self) -> str:
        return f"{self.a}+{self.b}="

    @property
    def answer(self) -> str:
        return str(self.a + self.b)

    @property
    def id(self) -> str:
        return f"add-{self.a}-{self.b}"

    @property
    def split(self) -> Split:
        return split_of(self.a, self.b)

    def to_json(self) -> dict[str, str]:
        """The JSONL row: ``{"id", "problem", "answer"}``."""
        return {"id": self.id, "problem": self.problem, "answer": self.answer}


def split_of(a: int, b: int) -> Split:
    """The split an ordered pair belongs to (stable across runs and machines)."""
    digest = hashlib.sha256(f"{a}+{b}".encode()).digest()
    bucket = int.from_bytes(digest[:4], "big") % 1000
    if bucket in _TEST_BUCKETS:
        return "test"
    if bucket in _VALIDATION_BUCKETS:
        return "validation"
    return "train"


def iter_problems(split: Split, seed: int = 0) -> Iterator[AdditionProblem]:
    """An endless, deterministic stream of random problems of one split (may repeat)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r} (known: {', '.join(SPLITS)})")
    rng = random.Random(seed * 7_919 + _SPLIT_SALT[split])
    while True:
        a, b = rng.randint(LOW, HIGH), rng.randint(LOW, HIGH)
        if split_of(a, b) == split:
            yield AdditionProblem(a, b)


def problems(split: Split, count: int, seed: int = 0) -> list[AdditionProblem]:
    """``count`` distinct problems of ``split``, the same list for the same arguments.

    >>> len({p.id for p in problems("validation", 500)})
    500
    """
    seen: set[tuple[int, int]] = set()
    out: list[AdditionProblem] = []
    for item in iter_problems(split, seed):
        if (item.a, item.b) not in seen:
            seen.add((item.a, item.b))
            out.append(item)
            if len(out) == count:
                break
    return out


def parse_problem(text: str) -> AdditionProblem:
    """The problem inside a prompt that starts with ``"A+B="`` (what the model reads)."""
    left, sep, _ = text.partition("=")
    a, plus, b = left.partition("+")
    if not (sep and plus and a.isdigit() and b.isdigit()):
        raise ValueError(f"not an addition problem: {text!r}")
    return AdditionProblem(int(a), int(b))


def write_jsonl(path: str | Path, rows: Iterable[AdditionProblem]) -> int:
    """Write problems as JSONL rows; returns how many were written."""
    count = 0
    with Path(path).open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row.to_json()) + "\n")
            count += 1
    return count


def read_jsonl(path: str | Path) -> list[AdditionProblem]:
    """Read rows written by :func:`write_jsonl` (only ``problem`` is trusted)."""
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            rows.append(parse_problem(json.loads(line)["problem"]))
    return rows


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Write a split of the addition task as JSONL.")
    parser.add_argument("split", choices=SPLITS)
    parser.add_argument("count", type=int)
    parser.add_argument("out")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(write_jsonl(args.out, problems(args.split, args.count, args.seed)))
