"""inspect-ai through its ``openai-api`` provider against Ponder.

``single`` scores what vLLM scores (the same provider pointed straight at vLLM); the
``gsr2`` alias completes, and the usage inspect records adds up to vLLM's counters, its
reasoning tokens (``completion_tokens_details.reasoning_tokens``) being the candidates'.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.harnesses.conftest import (
    HARNESS_TIMEOUT_S,
    MODEL,
    PROBLEMS,
    THINKING_ALIAS,
    Served,
    harness_bin,
    offline_env,
    run_harness,
)

# Several harness runs per test, each a few imports-heavy processes.
pytestmark = [pytest.mark.vllm, pytest.mark.timeout(4 * HARNESS_TIMEOUT_S)]

TASK = """from inspect_ai import Task, task
from inspect_ai.dataset import json_dataset
from inspect_ai.scorer import exact
from inspect_ai.solver import generate


@task
def addition():
    return Task(dataset=json_dataset({data!r}), solver=generate(), scorer=exact())
"""


def _inspect(tmp: Path, name: str, service: str, base_url: str, model: str) -> dict[str, Any]:
    """Run ``inspect eval`` once (greedy); return its JSON log."""
    logs = tmp / name
    env = offline_env(tmp) | {
        f"{service.upper()}_BASE_URL": base_url,
        f"{service.upper()}_API_KEY": "unused",
        "INSPECT_LOG_DIR": str(logs),
    }
    command = [
        str(harness_bin(".venv-inspect", "inspect")),
        *("eval", "addition_task.py", "--model", f"openai-api/{service}/{model}"),
        *("--log-format", "json", "--display", "plain", "--temperature", "0"),
        *("--max-tokens", "8", "--seed", "1", "--max-connections", "2"),
    ]
    run_harness(command, env, tmp / f"{name}.log")
    [log] = logs.glob("*.json")
    data: dict[str, Any] = json.loads(log.read_text())
    assert data["status"] == "success", data.get("error")
    return data


def _accuracy(log: dict[str, Any]) -> float:
    return float(log["results"]["scores"][0]["metrics"]["mean"]["value"])


def _answers(log: dict[str, Any]) -> list[str]:
    samples = sorted(log["samples"], key=lambda s: str(s["id"]))
    return [s["output"]["completion"] for s in samples]


def test_inspect_scores_as_vllm_and_a_scaffold_reports_its_thinking(
    served: Served, tmp_path: Path, addition_jsonl: Path
) -> None:
    (tmp_path / "addition_task.py").write_text(TASK.format(data=str(addition_jsonl)))
    direct = _inspect(tmp_path, "vllm", "vllm", served.vllm.base_url, MODEL)
    single = _inspect(tmp_path, "single", "ponder", f"{served.ponder}/v1", MODEL)
    assert _accuracy(single) == _accuracy(direct)
    assert 0 < _accuracy(direct) < 1
    assert _answers(single) == _answers(direct)

    generated = served.vllm.metric("vllm:generation_tokens_total")
    alias = f"{MODEL}+{THINKING_ALIAS}"
    thought = _inspect(tmp_path, "gsr", "ponder", f"{served.ponder}/v1", alias)
    assert len(thought["samples"]) == PROBLEMS
    [usage] = thought["stats"]["model_usage"].values()
    # Every token vLLM generated is in the usage inspect saw; the candidates are reasoning.
    assert usage["output_tokens"] == served.vllm.metric("vllm:generation_tokens_total") - generated
    assert 0 < usage["reasoning_tokens"] < usage["output_tokens"]
