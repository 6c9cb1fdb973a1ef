"""lm-evaluation-harness (``lm-eval[api]``) against Ponder, the same as against vLLM.

- ``generate_until`` through ``local-chat-completions``: ``single`` scores what vLLM
  scores; the ``maj4`` alias completes, and Ponder's usage adds up to vLLM's counters.
- ``loglikelihood`` (multiple choice) through ``local-completions``, four prompts per
  request (``echo``, ``logprobs``, ``max_tokens: 1``): ``single`` gives vLLM's
  loglikelihoods and accuracy, with one engine request per request lm-eval sends.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scaffolds.models import model_path
from tests.harnesses.conftest import (
    ALIAS,
    HARNESS_TIMEOUT_S,
    MODEL,
    PROBLEMS,
    Served,
    harness_bin,
    offline_env,
    run_harness,
)

SHIPPED_MODEL = model_path("ponder-addition")

# Several harness runs per test, each a few imports-heavy processes.
pytestmark = [pytest.mark.vllm, pytest.mark.timeout(4 * HARNESS_TIMEOUT_S)]

GENERATE = """task: ponder_addition_gen
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 8
  do_sample: false
  temperature: 0.0
metric_list:
  - metric: exact_match
"""

CHOICE = """task: ponder_addition_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: choices
doc_to_target: label
target_delimiter: ""
metric_list:
  - metric: acc
"""


def _lm_eval(
    tmp: Path, name: str, model: str, model_args: dict[str, Any], task: str, *extra: str
) -> dict[str, Any]:
    """Run ``lm_eval`` once; return its results file and logged samples."""
    out = tmp / name
    args = ",".join(f"{k}={v}" for k, v in model_args.items())
    command = [
        str(harness_bin(".venv-lmeval", "lm_eval")),
        *("--model", model, "--model_args", args, "--tasks", task),
        *("--include_path", str(tmp / "tasks"), "--output_path", str(out), "--log_samples"),
        *extra,
    ]
    run_harness(command, offline_env(tmp), tmp / f"{name}.log")
    [results] = out.rglob("results_*.json")
    [samples] = out.rglob(f"samples_{task}_*.jsonl")
    return {
        "results": json.loads(results.read_text())["results"][task],
        "samples": [json.loads(line) for line in samples.read_text().splitlines()],
    }


@pytest.fixture
def tasks(tmp_path: Path, addition_jsonl: Path) -> Path:
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "generate.yaml").write_text(GENERATE.format(data=addition_jsonl))
    (folder / "choice.yaml").write_text(CHOICE.format(data=addition_jsonl))
    return tmp_path


def _chat_args(base: str, model: str) -> dict[str, Any]:
    return {
        "model": model,
        "base_url": f"{base}/chat/completions",
        "num_concurrent": 1,
        "max_retries": 1,
        "tokenized_requests": False,
        "tokenizer_backend": None,
    }


def test_generate_until_through_chat_scores_as_vllm_and_a_scaffold_adds_up(
    served: Served, tasks: Path
) -> None:
    task = "ponder_addition_gen"
    ponder = f"{served.ponder}/v1"
    chat = ("--apply_chat_template",)
    direct = _lm_eval(
        tasks,
        "vllm",
        "local-chat-completions",
        _chat_args(served.vllm.base_url, MODEL),
        task,
        *chat,
    )
    single = _lm_eval(
        tasks, "single", "local-chat-completions", _chat_args(ponder, MODEL), task, *chat
    )
    score = direct["results"]["exact_match,none"]
    assert single["results"]["exact_match,none"] == score
    assert 0 < score < 1  # the model is right on some of them: the score can tell
    assert [s["resps"] for s in single["samples"]] == [s["resps"] for s in direct["samples"]]

    generated = served.vllm.metric("vllm:generation_tokens_total")
    labels = {"model": MODEL, "scaffold": "majority"}
    before = served.metric("ponder_run_tokens_total", kind="completion", **labels)
    alias = f"{MODEL}+{ALIAS}"
    voted = _lm_eval(
        tasks, "maj4", "local-chat-completions", _chat_args(ponder, alias), task, *chat
    )
    assert len(voted["samples"]) == PROBLEMS
    assert 0 <= voted["results"]["exact_match,none"] <= 1
    # Every token vLLM generated for the run is in Ponder's usage, and nothing else.
    spent = served.metric("ponder_run_tokens_total", kind="completion", **labels) - before
    assert spent == served.vllm.metric("vllm:generation_tokens_total") - generated > 0
    assert served.metric("ponder_run_engine_calls_total", **labels) == PROBLEMS


def test_loglikelihood_through_completions_matches_vllm(served: Served, tasks: Path) -> None:
    task = "ponder_addition_mc"

    def args(base: str) -> dict[str, Any]:
        return {
            "model": MODEL,
            "base_url": f"{base}/completions",
            "num_concurrent": 1,
            "max_retries": 1,
            "tokenized_requests": False,
            "tokenizer_backend": "huggingface",
            "tokenizer": SHIPPED_MODEL,
        }

    batch = ("--batch_size", "4")  # four prompts in one request
    direct = _lm_eval(
        tasks, "mc-vllm", "local-completions", args(served.vllm.base_url), task, *batch
    )
    requests = served.metric("ponder_requests_total", endpoint="completions", status="200")
    calls = served.metric("ponder_engine_calls_total", model=MODEL)
    single = _lm_eval(
        tasks, "mc-single", "local-completions", args(f"{served.ponder}/v1"), task, *batch
    )
    # Each request's list of prompts went to vLLM as one request, as lm-eval sent it.
    requests = (
        served.metric("ponder_requests_total", endpoint="completions", status="200") - requests
    )
    assert served.metric("ponder_engine_calls_total", model=MODEL) - calls == requests
    assert 0 < requests < 3 * PROBLEMS
    assert single["results"]["acc,none"] == direct["results"]["acc,none"]
    assert direct["results"]["acc,none"] > 0
    # Each choice's loglikelihood, as lm-eval logged it (a string per choice).
    ours = [float(r[0][0]) for s in single["samples"] for r in s["resps"]]
    theirs = [float(r[0][0]) for s in direct["samples"] for r in s["resps"]]
    assert len(ours) == 3 * PROBLEMS
    assert ours == pytest.approx(theirs, abs=1e-3)
