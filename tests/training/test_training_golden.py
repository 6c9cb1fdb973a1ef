"""The rows training builds stay what they were before the scaffold code path was unified."""

from __future__ import annotations

import json
from pathlib import Path

from tests.training.golden_rows import golden_rows

FIXTURE = Path(__file__).parent / "fixtures" / "rows_before.json"


def test_rows_and_rollouts_equal_the_pinned_ones() -> None:
    pinned = json.loads(FIXTURE.read_text())
    built = json.loads(json.dumps(golden_rows(), sort_keys=True))
    assert built.keys() == pinned.keys()
    for key in pinned:
        assert built[key] == pinned[key], key
