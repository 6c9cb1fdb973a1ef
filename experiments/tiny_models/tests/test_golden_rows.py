"""The demo trainers' own rows stay what they were before the scaffold code path was
unified (pinned with ``tests/training/fixtures/rows_before.json``'s rows, and split from
it when the demo became an experiment)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from experiments.tiny_models import gsr_train, rc_train
from scaffolds.evaluation.addition_task import problems

FIXTURE = Path(__file__).parent / "fixtures" / "demo_rows_before.json"


def demo_rows() -> dict[str, Any]:
    """The rows of the demo's refine trainer and of the list-sum RC trainer, on fixed seeds."""
    items = problems("train", 3, seed=5)
    candidates = [["1", "2", str(int(p.answer))] for p in items]
    return {
        "demo/gsr_refine": gsr_train.refine_rows(items, candidates),
        "demo/rc": rc_train.training_rows("rc", 4, seed=0),
        "demo/rc-direct": rc_train.training_rows("direct", 4, seed=0),
    }


def test_demo_rows_equal_the_pinned_ones() -> None:
    pinned = json.loads(FIXTURE.read_text())
    built = json.loads(json.dumps(demo_rows(), sort_keys=True))
    assert built.keys() == pinned.keys()
    for key in pinned:
        assert built[key] == pinned[key], key
