"""``ponder train verifier``: graded eval samples -> yes/no SFT rows -> a LoRA adapter
(TRL steps on a tiny random model with SmolLM2's tokenizer, whose "yes" and "no" are
one token each) -> the adapter serving as a verifier in process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from training.cli import train_app


def tiny_smollm2_vocab_model(out: Path) -> Path:
    """A random 2-layer Llama (hidden 32) over SmolLM2-135M-Instruct's tokenizer."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from scaffolds.models.prepare import prepare_model

    tokenizer = AutoTokenizer.from_pretrained(prepare_model("smollm2-135m-instruct"))
    tokenizer.save_pretrained(out)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("trl")
    pytest.importorskip("peft")
    return tiny_smollm2_vocab_model(tmp_path_factory.mktemp("tiny-smollm2-vocab"))


async def test_a_verifier_trains_from_eval_results_and_serves_in_process(
    base_dir: Path, tmp_path: Path
) -> None:
    from scaffolds.verifiers import LocalVerifier

    problems = tmp_path / "problems.jsonl"
    problems.write_text(
        "".join(
            json.dumps({"id": f"p{i}", "problem": f"{i}+{i}=", "answer": str(2 * i)}) + "\n"
            for i in range(3)
        )
    )
    results = tmp_path / "results.jsonl"
    records = [
        {
            "scaffold": "single",
            "id": f"p{i}",
            "sample": s,
            "response": f"{i}+{i}={2 * i + s}",
            "correct": s == 0,
        }
        for i in range(3)
        for s in range(3)
    ]
    records.append({"scaffold": "single", "id": "p0", "sample": 9, "error": "boom"})
    # a held-out problem's samples are never trained on, whatever their id
    records += [{"scaffold": "single", "id": "p2", "sample": 5, "response": "4", "correct": True}]
    held_out = tmp_path / "held_out.jsonl"
    held_out.write_text(json.dumps({"id": "h0", "problem": "2+2=", "answer": "4"}) + "\n")
    results.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "verifier"
    args = ["verifier", "--model", str(base_dir), "--results", str(results)]
    args += ["--problems", str(problems), "--held-out", str(held_out), "--out", str(out)]
    args += ["--max-steps", "2"]
    args += ["--batch-size", "2", "--threads", "1", "--no-progress", "--lr", "1e-3"]
    result = CliRunner().invoke(train_app, args)
    assert result.exit_code == 0, result.output
    # p0 and p1 (p2 is held out): 2 right and 4 wrong samples, balanced to 2 and 2
    assert "4 rows: 2 right, 2 wrong" in result.output
    final = out / "final"
    assert (final / "adapter_config.json").is_file()
    meta = json.loads((final / "ponder_training.json").read_text())
    assert meta["kinds"] == ["verify"] and meta["rows"] == 4 and meta["global_step"] == 2
    verifier = LocalVerifier(final)
    try:
        verdicts = await verifier.verify("1+1=", ["1+1=2", "1+1=3"])
    finally:
        await verifier.aclose()
    assert len(verdicts.scores) == 2 and all(0.0 < s < 1.0 for s in verdicts.scores)


def test_a_process_verifier_trains_on_rollout_labels_and_scores_beam_steps(
    base_dir: Path, tmp_path: Path
) -> None:
    """``--process`` end to end: rollouts through an in-process engine on the base model,
    per-step rows, one TRL step, and the adapter giving per-step scores in ``beam``."""
    import asyncio

    from scaffolds.core.run import run_scaffold
    from scaffolds.core.run_settings import RunSettings
    from scaffolds.core.trace import StepNote
    from scaffolds.engines.mock import MockEngine
    from scaffolds.engines.protocol import GenerateRequest, Message
    from scaffolds.problem import Problem
    from scaffolds.strategies import Beam
    from scaffolds.verifiers import LocalVerifier

    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps({"id": "p", "problem": "1+1=", "answer": "2"}) + "\n")
    results = tmp_path / "results.jsonl"
    records = [
        {
            "scaffold": "single",
            "id": "p",
            "sample": 0,
            "response": "one and one\n\n\\boxed{2}",
            "correct": True,
        },
        {
            "scaffold": "single",
            "id": "p",
            "sample": 1,
            "response": "one and two\n\n\\boxed{3}",
            "correct": False,
        },
    ]
    results.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "process-verifier"
    args = ["verifier", "--model", str(base_dir), "--results", str(results)]
    args += ["--problems", str(problems), "--out", str(out), "--process"]
    args += ["--engine", f"local:{base_dir}", "--rollouts", "2", "--rollout-max-tokens", "3"]
    args += ["--soft", "--no-balance", "--max-steps", "1", "--batch-size", "2"]
    args += ["--threads", "1", "--no-progress", "--lr", "1e-3"]
    result = CliRunner().invoke(train_app, args)
    assert result.exit_code == 0, result.output
    # one request (n=2) from each sample's first step; the second step is the sample itself
    assert "2 rollout requests (n=2)" in result.output
    final = out / "final"
    meta = json.loads((final / "ponder_training.json").read_text())
    assert meta["kinds"] == ["verify_step"] and meta["global_step"] == 1
    verifier = LocalVerifier(final)
    assert verifier.process

    def grow(request: GenerateRequest) -> list[str]:
        prompt = request.prompt
        assert not isinstance(prompt, str)
        partial = prompt[-1].content if prompt[-1].role == "assistant" else ""
        return (["one and one", "one and two"] if not partial else ["\\boxed{2}", "\\boxed{3}"])[
            : request.params.n
        ]

    problem = Problem.from_messages((Message("user", "1+1="),))
    beam = Beam(width=1, expand=2, max_steps=2)
    try:
        run = asyncio.run(
            run_scaffold(beam, problem, MockEngine(grow), RunSettings(verifier=verifier))
        )
    finally:
        asyncio.run(verifier.aclose())
    scored = [e.values for e in run.events if isinstance(e, StepNote) and e.kind == "scores"]
    # level 1: two one-step paths; level 2: the kept path's two two-step continuations
    assert [[len(s) for s in v["steps"]] for v in scored] == [[1, 1], [2, 2]]
    assert all(v["scores"] == [s[-1] for s in v["steps"]] for v in scored)
    # the kept path's first step scores as it did alone (the same prefix asked again)
    kept = max(scored[0]["scores"])
    assert [s[0] for s in scored[1]["steps"]] == pytest.approx([kept, kept], abs=1e-3)
    assert all(0.0 < x < 1.0 for v in scored for s in v["steps"] for x in s)
