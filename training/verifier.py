"""A generative verifier from graded samples: ``ponder train verifier``.

Each graded sample (a ``ponder eval`` record: ``id``, ``response``, ``correct``) becomes
one SFT row: the verifier's own question
(:data:`~scaffolds.verifiers.generative.VERIFY_TEMPLATE`, the problem and the sample) as
a user message, and ``yes`` (the grader marked it right) or ``no`` as the answer. With
``balance``, the larger class is cut down (seeded) to the size of the smaller, so the
verifier does not learn the base rate alone. The rows train a LoRA adapter on the
policy's base with TRL's SFT trainer (:func:`training.sft.run_sft`); the adapter's
folder serves as a verifier in process (``--verifier local:DIR``, transformers loads the
adapter onto its base) or through vLLM with the adapter, as the served model that
``verifier=`` names.

>>> records = [{"id": "a", "response": "4", "correct": True},
...            {"id": "a", "response": "5", "correct": False},
...            {"id": "a", "response": "3", "correct": False},
...            {"id": "b", "response": "", "correct": False}]
>>> rows = verifier_rows(records, {"a": "2+2?"}, balance=False)
>>> [(r["completion"][0]["content"], r["correct"]) for r in rows]
[('yes', True), ('no', False), ('no', False)]
>>> rows[0]["prompt"][0]["content"].splitlines()[:5]
['### Problem', '2+2?', '', '### Proposed solution', '4']
>>> sorted(r["completion"][0]["content"] for r in verifier_rows(records, {"a": "2+2?"}))
['no', 'yes']
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from typing import Any

from scaffolds.verifiers.generative import VERIFY_TEMPLATE

__all__ = ["balanced", "verifier_rows"]


def verifier_rows(
    records: Iterable[Mapping[str, Any]],
    problems: Mapping[str, str],
    *,
    balance: bool = True,
    contrast: bool = False,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """SFT rows (TRL's conversational prompt/completion) from graded records; records
    that failed, are ungraded, have no text or no known problem are left out."""
    rows: list[dict[str, Any]] = []
    for record in records:
        if record.get("error") or record.get("correct") is None:
            continue
        text = str(record.get("response") or "").strip()
        problem = problems.get(str(record.get("id")))
        if not text or problem is None:
            continue
        right = bool(record["correct"])
        question = VERIFY_TEMPLATE.render(problem=problem, solution=text)
        rows.append(
            {
                "prompt": [{"role": "user", "content": question}],
                "completion": [{"role": "assistant", "content": "yes" if right else "no"}],
                "kind": "verify",
                "correct": right,
                "id": str(record.get("id")),
                "scaffold": record.get("scaffold"),
            }
        )
    if contrast:
        return contrasted(rows, seed=seed)
    return balanced(rows, seed=seed) if balance else rows


def contrasted(rows: list[dict[str, Any]], *, seed: int = 0) -> list[dict[str, Any]]:
    """Only the problems with right and wrong samples, each balanced on its own: rows
    that tell one problem's candidates apart, where a problem whose samples all agree
    teaches only how hard the problem is (which a vote already knows).

    >>> rows = [{"id": i, "correct": c} for i, c in
    ...         [("a", True), ("a", False), ("a", False), ("b", True), ("b", True)]]
    >>> [(r["id"], r["correct"]) for r in contrasted(rows)]
    [('a', True), ('a', False)]
    """
    by_problem: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_problem.setdefault(str(row["id"]), []).append(row)
    kept: set[int] = set()
    for index, group in enumerate(by_problem.values()):
        if any(r["correct"] for r in group) and not all(r["correct"] for r in group):
            kept |= {id(r) for r in balanced(group, seed=seed + index)}
    return [r for r in rows if id(r) in kept]


def balanced(rows: list[dict[str, Any]], *, seed: int = 0) -> list[dict[str, Any]]:
    """``rows`` with as many ``correct`` as not: the larger class cut down, seeded, the
    order kept."""
    yes = [r for r in rows if r["correct"]]
    no = [r for r in rows if not r["correct"]]
    keep = min(len(yes), len(no))
    rng = random.Random(seed)
    kept = {id(r) for r in rng.sample(yes, keep) + rng.sample(no, keep)}
    return [r for r in rows if id(r) in kept]
