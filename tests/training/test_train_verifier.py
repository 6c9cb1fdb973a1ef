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
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
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
        "".join(json.dumps({"id": f"p{i}", "problem": f"{i}+{i}=", "answer": str(2 * i)}) + "\n"
                for i in range(3))
    )  # fmt: skip
    results = tmp_path / "results.jsonl"
    records = [
        {"scaffold": "single", "id": f"p{i}", "sample": s, "response": f"{i}+{i}={2 * i + s}",
         "correct": s == 0}
        for i in range(3) for s in range(3)
    ]  # fmt: skip
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
