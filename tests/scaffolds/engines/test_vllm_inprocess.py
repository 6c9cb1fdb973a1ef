"""The in-process vLLM engine, run inside the vLLM venv on the tiny random Llama.

vLLM is not importable in Ponder's environment, so the engine is exercised by a child
process (:mod:`tests.scaffolds.engines.inprocess_vllm_check`) that reports what it saw as JSON.
"""

from __future__ import annotations

from typing import Any

import pytest

from testing.child_report import child_report
from testing.vllm import CACHE, build_tiny_model, vllm_python_or_skip

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    python = vllm_python_or_skip()
    CACHE.mkdir(exist_ok=True)
    model_dir = build_tiny_model(python, CACHE / "tiny-llama")
    report, _ = child_report(
        python,
        "tests.scaffolds.engines.inprocess_vllm_check",
        str(model_dir),
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
    )
    return report


def test_n_samples_are_one_request_with_real_token_ids(report: dict[str, Any]) -> None:
    assert report["n_samples"] == 3
    assert report["usage"]["calls"] == 1
    counts = report["completion_tokens"]
    assert report["token_counts"] == report["logprob_counts"] == counts
    assert all(0 < count <= 12 for count in counts)
    # Cut at 12 tokens unless the last one is the end of sequence (which may be the 12th).
    ends = report["last_is_eos"]
    assert report["finish_reasons"] == ["stop" if eos else "length" for eos in ends]
    assert all(eos or c == 12 for c, eos in zip(counts, ends, strict=True))
    # No stop strings: a sample that stopped ended at end of sequence (stop_reason None).
    assert report["ended_at_eos"] == [f == "stop" for f in report["finish_reasons"]]
    assert report["stop_matched"] == [False] * 3
    assert report["usage"]["completion_tokens"] == sum(counts)
    assert report["usage"]["prompt_tokens"] == report["prompt_ids"] > 0


def test_a_sample_says_whether_a_stop_string_or_end_of_sequence_ended_it(
    report: dict[str, Any],
) -> None:
    # The stop string is kept in the text, so a sample that ends with one stopped there.
    for finish, ends_with_stop, matched, at_eos in report["stop_cases"]:
        assert matched is (finish == "stop" and ends_with_stop)
        assert at_eos is (finish == "stop" and not ends_with_stop)
    # A bias on the EOS token ends the sample at once: stop_reason None.
    assert report["forced_eos"] == ["", "stop", False, True]


def test_seeded_calls_repeat_and_hit_the_prefix_cache(report: dict[str, Any]) -> None:
    assert report["seeded_repeat_equal"] is True
    assert report["second_cached_tokens"] > 0


def test_plain_prompts_and_streaming(report: dict[str, Any]) -> None:
    assert report["plain_finish"] == ("stop" if report["plain_last_is_eos"] else "length")
    assert report["plain_last_is_eos"] or report["plain_tokens"] == 5
    assert 0 < report["plain_tokens"] <= 5
    assert report["stream_matches_result"] is True
    assert 0 < report["stream_tokens"] <= 8


def test_cancelling_a_call_aborts_it_inside_vllm(report: dict[str, Any]) -> None:
    assert report["cancelled"] is True
    assert report["unfinished_after_cancel"] == 0


def test_a_scaffold_runs_over_it(report: dict[str, Any]) -> None:
    assert report["majority_calls"] == 1
    assert 4 <= report["majority_completion_tokens"] <= 32


def test_top_logprobs_and_a_continued_message(report: dict[str, Any]) -> None:
    assert report["top_counts"] == report["top_tokens"]
    assert report["top_widths"] == [3] and report["top_sorted"] is True
    assert report["top_logprobs_alone"] is True
    kinds, finishes = report["forcing_kinds"], report["forcing_finishes"]
    assert kinds[0] == "generate" and len(kinds) == len(finishes)
    # Continued exactly when the first call ended by itself (one wait at most).
    assert kinds[1:] == (["continue"] if finishes[0] == "stop" else [])
