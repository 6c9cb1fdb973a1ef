"""The list-sum task for Reasoning Cache: the last digit of the sum of a labelled list.

A problem is a list of one-digit numbers, each tagged with a distinct letter, ending in
``=``; the answer is the last digit of their sum (the sum mod 10)::

    k7q3b9z1m4=   ->   4        (7+3+9+1+4 = 24)

Labels are drawn at random from ``a..z`` for every problem, so a list has at most 26
numbers. They give every position a name the model can look up by content: the
Reasoning Cache summary points at the next number to read by its label, not by a count.

The RC chunk reads :data:`READ_PER_CHUNK` numbers from where the summary points, writing
each number with the running total after it, then the new state (the next label, or
``=`` at the end, and the running total)::

    k7q3b9z1m4=            -> k77q30;b0     (start: read k, q; next is b, total 0)
    k7q3b9z1m4=|b0>        -> b99z10;m0     (the compact rc_reasoning_continue template)
    k7q3b9z1m4=||k77q30;b0#  -> b0          (the compact rc_summary template: the state)
    k7q3b9z1m4=|m0>        -> m44;=4        (the end: the last number written is the answer)
    k7q3b9z1m4=|=4>        -> ;=4           (past the end: the state stays)

The running total is kept mod 10 so that the state is bounded: every state a chunk
meets on a long list (a label and a digit) also occurs on short training lists; what
grows with the list is only the input the chunk must find its place in.

Splits are decided by a hash of the problem text (like
:mod:`scaffolds.evaluation.addition_task`), so
train and test problems never coincide.

>>> p = ListSumProblem.parse("k7q3b9z1m4=")
>>> p.answer, p.length, p.start_state
('4', 5, 'k0')
>>> p.chunk("k0"), p.chunk("b0"), p.chunk("m0"), p.chunk("=4")
('k77q30;b0', 'b99z10;m0', 'm44;=4', ';=4')
>>> state_of_chunk("b99z10;m0")
'm0'
>>> [len(q.labels) for q in problems("test", 3, lengths=(16,))]
[16, 16, 16]
"""

from __future__ import annotations

import hashlib
import random
import string
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

Split = Literal["train", "test"]
SPLITS: tuple[Split, ...] = ("train", "test")
LABELS = string.ascii_lowercase
MAX_LENGTH = len(LABELS)
READ_PER_CHUNK = 2
"""Numbers one RC reasoning chunk reads."""
END = "="
"""Ends the problem, and stands for "past the last number" in a state."""
STATE_SEPARATOR = ";"
"""Separates a chunk's work from the state it ends with."""
_TEST_BUCKETS = range(0, 100)  # of 1,000: 10% of all problems are test problems
_SPLIT_SALT = {"train": 0, "test": 1_000_003}


@dataclass(frozen=True, slots=True)
class ListSumProblem:
    labels: str
    digits: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.labels) != len(self.digits) or not self.labels:
            raise ValueError("a problem needs as many labels as digits, at least one")
        if len(set(self.labels)) != len(self.labels) or not set(self.labels) <= set(LABELS):
            raise ValueError(f"labels must be distinct letters a..z (got {self.labels!r})")
        if any(not 0 <= d <= 9 for d in self.digits):
            raise ValueError("numbers must be one digit")

    @classmethod
    def parse(cls, text: str) -> ListSumProblem:
        """The problem at the start of ``text`` (a prompt starts with the problem)."""
        body, sep, _ = text.partition(END)
        if not sep or len(body) % 2:
            raise ValueError(f"not a list-sum problem: {text!r}")
        labels, digits = body[0::2], body[1::2]
        if not digits.isdigit():
            raise ValueError(f"not a list-sum problem: {text!r}")
        return cls(labels, tuple(int(d) for d in digits))

    @property
    def problem(self) -> str:
        return "".join(f"{a}{d}" for a, d in zip(self.labels, self.digits, strict=True)) + END

    @property
    def answer(self) -> str:
        return str(sum(self.digits) % 10)

    @property
    def id(self) -> str:
        return f"listsum-{self.problem[:-1]}"

    @property
    def length(self) -> int:
        return len(self.digits)

    @property
    def start_state(self) -> str:
        """The state before anything is read: the first label, total 0."""
        return f"{self.labels[0]}0"

    @property
    def chunks_needed(self) -> int:
        """RC reasoning chunks that read the whole list."""
        return -(-self.length // READ_PER_CHUNK)

    def chunk(self, state: str) -> str:
        """The correct reasoning chunk from ``state`` (``<label or => <total digit>``)."""
        label, total = state[0], int(state[1:])
        if label == END:
            return f"{STATE_SEPARATOR}{END}{total}"
        at = self.labels.index(label)
        work = []
        for index in range(at, min(at + READ_PER_CHUNK, self.length)):
            total = (total + self.digits[index]) % 10
            work.append(f"{self.labels[index]}{self.digits[index]}{total}")
        after = at + READ_PER_CHUNK
        following = self.labels[after] if after < self.length else END
        return "".join(work) + f"{STATE_SEPARATOR}{following}{total}"

    def trajectory(self, chunks: int | None = None) -> list[tuple[str, str]]:
        """(state, chunk) for ``chunks`` RC steps (default: just enough) from the start.

        >>> ListSumProblem.parse("a1b2c3=").trajectory(3)
        [('a0', 'a11b23;c3'), ('c3', 'c36;=6'), ('=6', ';=6')]
        """
        state, out = self.start_state, []
        for _ in range(self.chunks_needed if chunks is None else chunks):
            text = self.chunk(state)
            out.append((state, text))
            state = state_of_chunk(text)
        return out


def state_of_chunk(chunk: str) -> str:
    """The state a chunk ends with (what the summary step should write)."""
    return chunk.rpartition(STATE_SEPARATOR)[2]


def split_of(problem: str) -> Split:
    """The split a problem text belongs to (stable across runs and machines)."""
    digest = hashlib.sha256(problem.encode()).digest()
    return "test" if int.from_bytes(digest[:4], "big") % 1000 in _TEST_BUCKETS else "train"


def iter_problems(split: Split, lengths: Sequence[int], seed: int = 0) -> Iterator[ListSumProblem]:
    """An endless, deterministic stream of ``split`` problems, lengths drawn from ``lengths``."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r} (known: {', '.join(SPLITS)})")
    if not lengths or any(not 1 <= n <= MAX_LENGTH for n in lengths):
        raise ValueError(f"lengths must be in 1..{MAX_LENGTH} (got {list(lengths)})")
    rng = random.Random(seed * 7_919 + _SPLIT_SALT[split])
    while True:
        n = rng.choice(list(lengths))
        item = ListSumProblem(
            "".join(rng.sample(LABELS, n)), tuple(rng.randrange(10) for _ in range(n))
        )
        if split_of(item.problem) == split:
            yield item


def problems(
    split: Split, count: int, *, lengths: Sequence[int], seed: int = 0
) -> list[ListSumProblem]:
    """``count`` distinct problems, the same list for the same arguments.

    >>> len({p.problem for p in problems("train", 300, lengths=(4, 5))})
    300
    """
    seen: set[str] = set()
    out: list[ListSumProblem] = []
    for item in iter_problems(split, lengths, seed):
        if item.problem not in seen:
            seen.add(item.problem)
            out.append(item)
            if len(out) == count:
                break
    return out
