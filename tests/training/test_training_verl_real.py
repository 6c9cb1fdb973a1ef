"""The verl agent loop against a real verl install, run in verl's own environment.

verl pins transformers apart from Ponder's, so ``tests/training/verl_real_check.py`` runs
as a child process of verl's interpreter (``PONDER_VERL_PYTHON``, by default
``.cache/verl-venv/bin/python``; training/README.md says how to build it) and prints one
``REPORT {json}`` line, which this test reads. Without that environment the test skips:
installing verl takes about 9 minutes and 1.9 GB, so CI does not build it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from testing.child_report import child_report

REPO = Path(__file__).resolve().parents[2]
VERL_PYTHON = REPO / os.environ.get("PONDER_VERL_PYTHON", ".cache/verl-venv/bin/python")
AGENT_LOOP_OUTPUT = "verl.experimental.agent_loop.agent_loop.AgentLoopOutput"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(660),
    pytest.mark.skipif(
        not VERL_PYTHON.exists(),
        reason=(
            f"no verl environment at {VERL_PYTHON} (set PONDER_VERL_PYTHON; building it takes "
            "about 9 minutes and 1.9 GB, so CI does not: see training/README.md, "
            "'Multi-node: verl')"
        ),
    ),
]


def run_check() -> dict[str, Any]:
    report, status = child_report(VERL_PYTHON, "tests.training.verl_real_check")
    assert report.get("error") is None, report["error"]
    assert status == (0 if report["ok"] else 1)
    return report


def test_agent_loop_runs_in_real_verl() -> None:
    report = run_check()
    failed = [name for name, passed in report["checks"].items() if not passed]
    assert not failed, json.dumps(report, indent=1)
    assert report["ok"] is True
    assert report["versions"]["verl"].startswith("0.")
    assert report["registry"]["entry"] == {"_target_": "training.verl_loop.PonderScaffoldAgentLoop"}

    single = report["single"]
    assert single["type"] == AGENT_LOOP_OUTPUT
    n = single["response_ids"]
    assert (
        n > 0 and single["response_mask"] == single["mask_sum"] == single["response_logprobs"] == n
    )
    assert single["reward_score"] == 1.0 and single["num_turns"] == 2
    assert single["extra_fields"] == {"ponder_mode": "direct", "ponder_step_kind": "generate"}

    group = report["group"]
    assert (group["planning_calls"], group["sample_calls"]) == (2, group["n"])
    assert len(group["prompt_ids"]) == 1  # every sample saw the same planned prompt
    assert group["rewards"] == [1.0] * group["n"]

    worker = report["worker"]
    shapes = worker["batch_shapes"]
    rows, prompt_length = shapes["prompts"]
    response_length = shapes["responses"][1]
    assert rows == 2 * group["n"]
    assert shapes["input_ids"] == [rows, prompt_length + response_length]
    assert shapes["rollout_log_probs"] == shapes["rm_scores"] == [rows, response_length]
    assert max(worker["prompt_tokens"]) == prompt_length  # the long refine prompt, truncated
    assert worker["rm_scores"] == [1.0] * group["n"] + [0.0] * group["n"]
    assert {"ponder_mode", "ponder_step_kind", "uid"} <= set(worker["non_tensor_keys"])
    assert report["ray_actor"]["rm_scores"] == worker["rm_scores"]  # same batch in a Ray actor
