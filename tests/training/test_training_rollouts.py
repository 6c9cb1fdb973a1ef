"""Scaffold-step rollouts: shared contexts, serving's templates, real sampled ids and logprobs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from scaffolds.engines.mock import MockEngine
from scaffolds.engines.protocol import GenerateRequest, Message
from scaffolds.spec.registry import get_prompt_set
from training.rollouts import (
    RolloutSettings,
    ScaffoldRollout,
    _groups,
    problem_from_prompt,
    rollout_group,
)

COMPACT = get_prompt_set("compact")
DEFAULT = get_prompt_set("default")


def scripted(request: GenerateRequest) -> str:
    p = request.prompt_text()
    if "Existing summary" in p:
        return "my summary"
    if "Proposed solution" in p:
        return "VERDICT: INCORRECT"
    if "Do not solve" in p:
        return "a note"
    return "\\boxed{8}"


def run(row: dict[str, Any], engine: MockEngine, prompt_set: str = "default") -> Any:
    settings = RolloutSettings(prompt_set=prompt_set, num_candidates=3)
    return asyncio.run(rollout_group(row, engine, n=4, settings=settings))


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ({"mode": "direct"}, "P?"),
        (
            {"mode": "gsr_refine", "candidates": ["a", "b"]},
            DEFAULT.template("gsr_refine").render(
                problem="P?", candidates=DEFAULT.candidates(["a", "b"]), count="2"
            ),
        ),
        (
            {"mode": "rsa_aggregate", "candidates": ["a", "b"]},
            DEFAULT.template("rsa_aggregate").render(
                problem="P?", candidates=DEFAULT.candidates(["a", "b"]), count="2"
            ),
        ),
        (
            {"mode": "rc_continue", "summary": "S"},
            DEFAULT.template("rc_reasoning_continue").render(problem="P?", summary="S"),
        ),
        (
            {"mode": "self_refine_refine", "solution": "x", "feedback": "y"},
            DEFAULT.template("self_refine_refine").render(problem="P?", solution="x", feedback="y"),
        ),
        (
            {"mode": "abstraction_solve", "abstraction": "N"},
            DEFAULT.template("abstraction_solve").render(abstraction="N", problem="P?"),
        ),
    ],
)
def test_stored_contexts_render_the_serving_templates(row: dict[str, Any], expected: str) -> None:
    engine = MockEngine(scripted)
    group = run({"prompt": "P?", **row}, engine)
    assert group.plan.prompt == expected
    assert len(engine.requests) == 1  # only the sampled step: the context was stored
    [request] = engine.requests
    assert request.params.n == 4 and request.prompt == expected
    assert len(group.completions) == 4


@pytest.mark.parametrize(
    ("mode", "kind"), [("gsr_refine", "refine"), ("rsa_aggregate", "aggregate")]
)
def test_policy_made_candidates_are_traced_and_shared(mode: str, kind: str) -> None:
    engine = MockEngine(scripted)
    group = run({"prompt": "P?", "mode": mode}, engine)
    assert [r.params.n for r in engine.requests] == [3, 4]  # 3 candidates once, then the group
    assert group.plan.context == {"candidates": ["\\boxed{8}"] * 3}
    kinds = [e.kind for e in group.events if getattr(e, "type", "") == "step_started"]
    assert kinds == ["generate", kind]


def test_policy_made_contexts_are_traced_and_shared() -> None:
    engine = MockEngine(scripted)
    group = run({"prompt": "P?", "mode": "rc_continue"}, engine)
    assert group.plan.context == {"summary": "my summary"}
    assert group.plan.prompt == DEFAULT.template("rc_reasoning_continue").render(
        problem="P?", summary="my summary"
    )
    assert [r.params.n for r in engine.requests] == [1, 1, 4]

    engine = MockEngine(scripted)
    group = run({"prompt": "P?", "mode": "self_refine_refine"}, engine)
    assert group.plan.context == {"solution": "\\boxed{8}", "feedback": "VERDICT: INCORRECT"}

    engine = MockEngine(scripted)
    group = run({"prompt": "P?", "mode": "abstraction_solve"}, engine)
    assert group.plan.context == {"abstraction": "a note"}


def test_chat_rows_and_unknown_modes() -> None:
    engine = MockEngine(lambda r: "ok")
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "P?"}]
    group = run({"prompt": messages, "mode": "rc_continue", "summary": "S"}, engine)
    assert group.plan.prompt == (
        Message("system", "sys"),
        Message(
            "user", DEFAULT.template("rc_reasoning_continue").render(problem="P?", summary="S")
        ),
    )
    with pytest.raises(ValueError, match="unknown rollout mode"):
        run({"prompt": "P?", "mode": "nope"}, engine)
    assert problem_from_prompt(messages).history == (Message("system", "sys"),)


def test_group_layout() -> None:
    rows = [{"prompt": p} for p in "aaaabbbb"]
    assert _groups(rows, 4) == [(0, 4), (4, 8)]
    assert _groups([{"prompt": p} for p in "aabbb"], 4) == [(0, 2), (2, 5)]
    mixed = [{"prompt": "a", "mode": "direct"}] * 2 + [{"prompt": "a", "mode": "gsr_refine"}] * 2
    assert _groups(mixed, 2) == [(0, 2), (2, 4)]


# -- on the tiny model: the ids and logprobs are the ones actually sampled ---------------


def fake_trainer(model: Any, tokenizer: Any, rows: list[dict[str, Any]] | None) -> Any:
    from accelerate import Accelerator

    model.train()
    return SimpleNamespace(
        model=model,
        model_wrapped=model,
        accelerator=Accelerator(cpu=True),
        processing_class=tokenizer,
        num_generations=3,
        num_generations_eval=3,
        temperature=1.0,
        top_p=1.0,
        max_completion_length=5,
        generation_kwargs={"top_k": 0},
        ponder_rows=rows,
    )


def test_scaffold_rollout_returns_sampled_ids_and_their_logprobs(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    import torch

    from training.common import load_model

    model, tokenizer = load_model(tiny_model_dir, threads=1)
    rows = [{"prompt": "12+30=", "mode": "gsr_refine", "candidates": ["41", "43"], "id": "a"}] * 3
    rows += [{"prompt": "11+11=", "mode": "direct", "id": "b"}] * 3
    prompts = [r["prompt"] for r in rows]
    rollout = ScaffoldRollout(
        RolloutSettings(prompt_set="compact"), trace_path=tmp_path / "t.jsonl"
    )
    out = rollout(prompts, fake_trainer(model, tokenizer, rows))
    assert model.training  # restored after sampling
    assert len(out["completion_ids"]) == 6
    refine_prompt = COMPACT.template("gsr_refine").render(
        problem="12+30=", candidates=COMPACT.candidates(["41", "43"]), count="2"
    )
    assert (
        out["step_prompt"][:3] == [refine_prompt] * 3 and out["step_prompt"][3:] == ["11+11="] * 3
    )
    assert out["step_kind"] == ["refine"] * 3 + ["generate"] * 3
    assert out["prompt_ids"][0] == tokenizer(refine_prompt, add_special_tokens=False)["input_ids"]
    for prompt_ids, ids, logprobs in zip(
        out["prompt_ids"], out["completion_ids"], out["logprobs"], strict=True
    ):
        assert 1 <= len(ids) <= 5 and len(logprobs) == len(ids)
        with torch.no_grad():
            logits = model(torch.tensor([prompt_ids + ids])).logits[0]
        expected = torch.log_softmax(logits.float(), dim=-1)[len(prompt_ids) - 1 : -1]
        expected = expected.gather(1, torch.tensor(ids).unsqueeze(1)).squeeze(1)
        assert torch.allclose(torch.tensor(logprobs), expected, atol=1e-4)
    lines = (tmp_path / "t.jsonl").read_text().splitlines()
    assert len(lines) == 2


def test_plain_grpo_trainer_rows_default_to_the_settings_mode(tiny_model_dir: Path) -> None:
    from training.common import load_model

    model, tokenizer = load_model(tiny_model_dir, threads=1)
    rollout = ScaffoldRollout(RolloutSettings(prompt_set="compact", default_mode="direct"))
    out = rollout(["1+1="] * 3, fake_trainer(model, tokenizer, None))
    assert out["step_prompt"] == ["1+1="] * 3
