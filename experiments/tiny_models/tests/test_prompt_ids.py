"""Training and serving feed the model the same prompt token ids, for every step kind.

Issue 20 suspected a train/serve mismatch behind the demo's refine@4 < single. These
tests pin the token level, not only the text: the ids the demo trainers build a row
from (:func:`experiments.tiny_models.gsr_train.encode_rows`, one id per character) equal the ids
LocalEngine feeds the served model for the call the scaffold makes, and the end token
the rows are trained to write is the one LocalEngine stops at.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from experiments.tiny_models.gsr_train import direct_row, encode_rows, refine_rows
from experiments.tiny_models.refine_diag import Recording
from scaffolds import RunSettings, SamplingParams, solve
from scaffolds.engines.mock import MockEngine
from scaffolds.engines.protocol import GenerateRequest, GenerateResult
from scaffolds.evaluation.addition_task import problems
from scaffolds.problem import Problem
from training.data import build_rows, row_kinds
from training.traces import TraceRecord

pytest.importorskip("torch")
pytest.importorskip("transformers")

from scaffolds.engines.local import LocalEngine
from scaffolds.engines.local_generate import encode_prompt

SCAFFOLDS = (
    ("single", "right"),
    ("gsr(n=2)", "right"),
    ("rsa(n=2, k=2, rounds=1)", "right"),
    ("rc(steps=2)", "right"),
    ("self_refine(max_rounds=2)", "wrong_then_fixed"),
    ("abstraction(m=2, n=2)", "right"),
)
"""Between them, every step kind that has training rows."""


def _prompt_ids(row: dict[str, Any]) -> list[int]:
    """The ids the demo trainer feeds before the completion (no end token)."""
    ids, _ = encode_rows([row])
    return [int(i) for i in ids[0, : len(row["prompt"])].tolist()]


def test_gsr_rows_have_the_ids_local_engine_sends(shipped_model_dir: Path) -> None:
    """The real path: gsr(n=4) on the shipped model through LocalEngine, as the
    experiments run it (chat messages, temperature 1.0, seeded)."""
    from transformers import GenerationConfig

    items = problems("test", 3, seed=0)

    async def run() -> list[list[tuple[GenerateRequest, GenerateResult]]]:
        engine = LocalEngine(shipped_model_dir, threads=1)
        out = []
        try:
            for index, item in enumerate(items):
                recording = Recording(engine)
                params = SamplingParams(temperature=1.0, max_tokens=8, seed=index)
                await solve(
                    "gsr(n=4)",
                    item.problem,
                    recording,
                    RunSettings(params=params, prompts="compact"),
                )
                out.append(recording.calls)
        finally:
            await engine.aclose()
        return out

    eos = GenerationConfig.from_pretrained(str(shipped_model_dir)).eos_token_id
    for item, calls in zip(items, asyncio.run(run()), strict=True):
        (_, drawn), (refine_request, refined) = calls
        candidates = [c.text for c in drawn.completions]
        row = refine_rows([item], [candidates])[0]
        assert refine_request.prompt_text() == row["prompt"]
        assert list(refined.prompt_token_ids or ()) == _prompt_ids(row)
        assert list(drawn.prompt_token_ids or ()) == _prompt_ids(direct_row(item))
        # The rows end in the end token the served model stops at.
        _, targets = encode_rows([row])
        assert int(targets[0][targets[0] != -100][-1]) == eos
        assert refine_request.params.temperature == 1.0


def _right(request: GenerateRequest) -> list[str]:
    return ["7"] * request.params.n


def _wrong_then_fixed(request: GenerateRequest) -> list[str]:
    """self_refine: a wrong first solution, feedback that says so, a right refinement
    (so both its feedback and its refine rows are kept)."""
    text = request.prompt_text()
    reply = "8" if text == "3+4=" else "bad" if text.endswith("?") else "7"
    return [reply] * request.params.n


@pytest.mark.parametrize("chat", [True, False], ids=["chat", "text"])
def test_every_row_kind_has_the_ids_the_scaffold_sends(shipped_model_dir: Path, chat: bool) -> None:
    """Each step kind's training row, from a compact-set trace (``build_rows``), is
    tokenized for training as the demo trainers do (text rows: one id per character;
    chat rows: the chat template, as TRL does) and compared with the ids LocalEngine's
    own encoding gives the request the scaffold sent for that step."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(shipped_model_dir))
    seen: set[str] = set()
    for spec, replies in SCAFFOLDS:
        engine = MockEngine(_right if replies == "right" else _wrong_then_fixed)
        problem = "3+4=" if chat else Problem.from_text("3+4=")
        result = asyncio.run(solve(spec, problem, engine, RunSettings(prompts="compact")))
        sent = {
            repr(r.prompt): encode_prompt(tokenizer, r.prompt, add_special_tokens=True)
            for r in engine.requests
        }
        record = TraceRecord(
            "p", "3+4=", "7", tuple(result.events), chat=chat, prompt_set="compact"
        )
        starts = {getattr(e, "step_id", None): e for e in result.events if e.type == "step_started"}
        for row in build_rows(record, lambda gold, text: text == gold):
            started: Any = starts[row["step_id"]]
            key = (
                repr(tuple(_message(m) for m in started.messages)) if chat else repr(started.prompt)
            )
            assert key in sent, (spec, row["kind"])
            if chat:
                trained = encode_prompt(tokenizer, tuple(_message(m) for m in row["prompt"]))
            else:
                trained = _prompt_ids(row)
            assert trained == sent[key], (spec, row["kind"], row["prompt"])
            seen.add(row["kind"])
    assert seen == set(row_kinds())


def _message(data: dict[str, str]) -> Any:
    from scaffolds.engines.protocol import Message

    role: Any = data["role"]
    return Message(role, data["content"])
