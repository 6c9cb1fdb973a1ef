"""evalscope (``openai_api`` eval type) against Ponder: streamed requests with
``stream_options.include_usage``, ``top_k`` and ``repetition_penalty``; ``single``
scores and answers what vLLM does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.harnesses.conftest import (
    HARNESS_TIMEOUT_S,
    MODEL,
    PROBLEMS,
    Served,
    harness_bin,
    offline_env,
    run_harness,
)

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(3 * HARNESS_TIMEOUT_S)]

GENERATION = {
    "temperature": 0.0,
    "max_tokens": 8,
    "stream": True,
    "top_k": 1,
    "repetition_penalty": 1.0,
    "seed": 1,
}


def _evalscope(tmp: Path, name: str, api_url: str, data: Path) -> dict[str, Any]:
    """Run ``evalscope eval`` on the local JSONL (general_qa); its report and answers."""
    work = tmp / name
    dataset = {"general_qa": {"local_path": str(data.parent), "subset_list": [data.stem]}}
    command = [
        str(harness_bin(".venv-evalscope", "evalscope")),
        *("eval", "--model", MODEL, "--api-url", api_url, "--api-key", "unused"),
        *("--eval-type", "openai_api", "--datasets", "general_qa"),
        *("--dataset-args", json.dumps(dataset), "--generation-config", json.dumps(GENERATION)),
        *("--work-dir", str(work), "--no-timestamp"),
    ]
    run_harness(command, offline_env(tmp), tmp / f"{name}.log")
    [report] = (work / "reports").rglob("*.json")
    predictions = [
        json.loads(line)
        for path in sorted((work / "predictions").rglob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    return {"report": json.loads(report.read_text()), "predictions": predictions}


def _answers(run: dict[str, Any]) -> list[str]:
    rows = sorted(run["predictions"], key=lambda p: int(p.get("index", 0)))
    return [str(row["model_output"]["choices"][0]["message"]["content"]) for row in rows]


def test_evalscope_streams_and_scores_as_vllm(
    served: Served, tmp_path: Path, addition_jsonl: Path
) -> None:
    direct = _evalscope(tmp_path, "vllm", served.vllm.base_url, addition_jsonl)
    single = _evalscope(tmp_path, "single", f"{served.ponder}/v1", addition_jsonl)
    assert _scores(single) == _scores(direct)
    assert 0 < _primary(direct) < 1  # ROUGE-L recall: right on some, so it can tell
    assert len(_answers(single)) == PROBLEMS
    assert _answers(single) == _answers(direct)
    # The usage evalscope read from the streams' last chunks is vLLM's.
    assert _output_tokens(single) == _output_tokens(direct) > 0


def _scores(run: dict[str, Any]) -> dict[str, float]:
    metrics = run["report"]["metrics"]
    return {json.dumps(m["identity"], sort_keys=True): float(m["score"]) for m in metrics}


def _primary(run: dict[str, Any]) -> float:
    wanted = run["report"]["primary_metric_identity"]
    return next(float(m["score"]) for m in run["report"]["metrics"] if m["identity"] == wanted)


def _output_tokens(run: dict[str, Any]) -> int:
    return sum(int(p["model_output"]["usage"]["output_tokens"]) for p in run["predictions"])
