"""The real-model experiment's whole chain (``python -m experiments.smollm2_refine``) on the shipped
1M-parameter addition model, in process: data, LoRA training of both arms, the paired
evaluation and the report.

Both data stages run for real: gsr traces (wrong refinements borrow a right candidate),
then plain samples regrouped into refine rows. The base model never writes a right
refinement (it never saw the refine format: RESULTS.md part 1), so the refine rows come
from its right samples.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scaffolds.evaluation.synthetic import addition_problems, write_rows

pytest.importorskip("peft")

COMMON = [
    "--base",
    "ponder-addition",
    "--prompts",
    "compact",
    "--engine",
    "local",
    "--max-tokens",
    "8",
    "--temperature",
    "1.0",
    "--threads",
    "1",
    "--no-progress",
]


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def test_data_train_eval_report_on_a_tiny_model(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    from experiments.smollm2_refine.__main__ import main
    from experiments.smollm2_refine.arms import row_tokens
    from scaffolds.models import model_path

    train, held_out, run = tmp_path / "train.jsonl", tmp_path / "eval.jsonl", tmp_path / "run"
    write_rows(train, addition_problems(16, seed=7))
    write_rows(held_out, addition_problems(6, seed=2000))
    with pytest.raises(SystemExit, match="every training problem is in the evaluation set"):
        main(["data", str(run), *COMMON, "--problems", str(train), "--eval-problems", str(train)])

    # Two training problems are also held out: they are dropped, the next 6 are traced.
    overlapping = tmp_path / "overlapping.jsonl"
    write_rows(overlapping, [*addition_problems(6, seed=2000), *addition_problems(2, seed=7)])
    held = ["--problems", str(train), "--eval-problems", str(overlapping)]
    main(["data", str(run), *COMMON, *held, "--limit", "6", "--borrow"])
    data = run / "data" / "data"
    direct = _lines(data / "direct.jsonl")
    traced = {str(t["id"]) for t in _lines(run / "data" / "traces.jsonl")}
    assert traced == {p["id"] for p in addition_problems(16, seed=7)[2:8]}
    assert 0 < len(direct) <= 6 * 2 * 4  # --samples 2 runs of 4 candidates, right ones kept
    assert all(row["correct"] and row["kind"] == "direct" for row in direct)

    # The rest are sampled (k=8, one request each) and regrouped into refine rows.
    main(["sample", str(run), *COMMON, *held, "--k", "8"])
    sampled = {str(t["id"]) for t in _lines(run / "sample" / "traces.jsonl")}
    assert sampled == {p["id"] for p in addition_problems(16, seed=7)[8:]}
    regrouped = _lines(run / "sample" / "data" / "gsr_refine.jsonl")
    assert regrouped and all(r["target"] in ("candidate", "borrowed") for r in regrouped)
    assert all(
        r["id"] in sampled and r["completion"][0]["content"] == r["answer"] for r in regrouped
    )

    # Rows rebuilt from the traces there are: nothing new is traced, the same rows come out.
    before = (data / "gsr_refine.jsonl").read_text() if (data / "gsr_refine.jsonl").exists() else ""
    main(["data", str(run), *COMMON, *held, "--rebuild", "--borrow"])
    assert len(_lines(run / "data" / "traces.jsonl")) == len(traced)
    after = (data / "gsr_refine.jsonl").read_text() if (data / "gsr_refine.jsonl").exists() else ""
    assert after == before
    regrouped_before = (run / "sample" / "data" / "gsr_refine.jsonl").read_text()
    main(["sample", str(run), *COMMON, *held, "--k", "8", "--rebuild"])
    assert (run / "sample" / "data" / "gsr_refine.jsonl").read_text() == regrouped_before

    train_args = ["--max-steps", "2", "--batch-size", "4", "--lora-r", "4", "--lora-alpha", "8"]
    main(["train", str(run), *COMMON, *train_args, "--save-steps", "1"])
    for arm in ("gsr", "direct"):
        final = run / "train" / arm / "final"
        assert (final / "adapter_model.safetensors").exists(), arm
        assert "step 2/2" in (run / "train" / arm / "train.log").read_text()
    mixed = _lines(run / "train" / "gsr" / "rows.jsonl")
    refine = [r for r in mixed if r["kind"] == "gsr_refine"]
    assert len(refine) >= len(regrouped) and len(mixed) - len(refine) >= 1  # + 25% direct
    control = _lines(run / "train" / "direct" / "rows.jsonl")
    assert control and all(row["kind"] == "direct" for row in control)
    count = row_tokens(AutoTokenizer.from_pretrained(model_path("ponder-addition")))
    mix = sum(count(row) for row in mixed)
    drawn = [count(row) for row in control]
    assert sum(drawn) - drawn[-1] < mix <= sum(drawn)  # the same training tokens

    main(["ship", str(run), *COMMON, "--name", "addition-gsr", "--to", str(tmp_path / "shipped")])
    shipped = tmp_path / "shipped" / "addition-gsr"
    info = json.loads((shipped / "ponder_adapter.json").read_text())
    assert info == {"name": "addition-gsr", "base": "ponder-addition", "prompts": "compact"}
    trained_dir = run / "train" / "gsr" / "final"
    halved, trained = (load_file(f / "adapter_model.safetensors") for f in (shipped, trained_dir))
    assert halved.keys() == trained.keys()
    assert all(halved[k].dtype == torch.float16 for k in halved)
    assert all(torch.allclose(halved[k].float(), trained[k], atol=1e-3) for k in halved)

    evaluation = ["--problems", str(held_out), "--seeds", "0", "1"]
    main(["eval", str(run), *COMMON, *evaluation])
    rows = _lines(run / "eval" / "gsr" / "seed-1.jsonl")
    assert len(rows) == 6 and all(len(r["candidates"]) == 4 for r in rows)
    report = json.loads((run / "report.json").read_text())
    assert report["problems"] == 6 and set(report["models"]) == {"base", "gsr", "direct"}
    assert set(report["models"]["gsr"]) == {"single", "maj@4", "refine@4"}
    assert "gsr/refine@4 - base/refine@4" in report["paired"]
    assert "gsr/refine@4 - gsr/maj@4" in report["paired"]
    assert "gsr/refine@4 - direct/maj@4" in report["paired"]
    maj = report["models"]["base"]["maj@4"]
    single = report["models"]["base"]["single"]
    assert maj["completion_tokens_mean"] > single["completion_tokens_mean"] > 0
    assert (run / "accuracy_vs_tokens.png").stat().st_size > 0
    # Where the refinement beats the vote and where it loses, by right candidates of 4:
    # the groups hold every run, and their shares add up to refine@4 - maj@4.
    for model in ("base", "gsr", "direct"):
        groups = report["against_vote"][model]
        assert sum(g["runs"] for g in groups) == 6 * 2
        assert all(0 <= g["right"] <= 4 for g in groups)
        gap = (
            report["models"][model]["refine@4"]["summary"]["accuracy"]
            - report["models"][model]["maj@4"]["summary"]["accuracy"]
        )
        assert sum(g["refine_minus_maj"] for g in groups) == pytest.approx(gap)
    assert "| right candidates (of 4) |" in (run / "report.md").read_text()
    assert "| gsr | refine@4 |" in (run / "report.md").read_text()

    main(["eval", str(run), *COMMON, *evaluation])  # resumes: nothing left to run
    assert len(_lines(run / "eval" / "gsr" / "seed-1.jsonl")) == 6

    # The same arm through rsa(4, 2, 2): its own rows and report; the gsr ones stay.
    rsa = ["--models", "gsr", "--scaffold", "rsa", "--rsa-k", "2", "--rsa-rounds", "2"]
    main(["eval", str(run), *COMMON, *evaluation, *rsa])
    rows = _lines(run / "eval-rsa" / "gsr" / "seed-0.jsonl")
    assert len(rows) == 6 and all(len(r["candidates"]) == 4 for r in rows)
    assert all(r["refine_tokens"] > 0 and r["prompt_tokens"]["refine"] > 0 for r in rows)
    report_rsa = json.loads((run / "report-rsa.json").read_text())
    # refine@4 joins from the gsr rows of the same problems and seeds, for the pair
    assert set(report_rsa["models"]["gsr"]) == {"single", "maj@4", "rsa@4", "refine@4"}
    assert report_rsa["models"]["gsr"]["refine@4"] == report["models"]["gsr"]["refine@4"]
    assert {"gsr/rsa@4 - gsr/maj@4", "gsr/rsa@4 - gsr/refine@4"} <= set(report_rsa["paired"])
    assert json.loads((run / "report.json").read_text()) == report
    assert (run / "accuracy_vs_tokens-rsa.png").stat().st_size > 0

    # Run 2 continues run 1 on policy: each arm samples the same training problems from
    # its run-1 adapter and trains that adapter further; the base's eval rows are run 1's.
    run2, parent = tmp_path / "run2", ["--parent", str(run)]
    with pytest.raises(SystemExit, match="--parent"):
        main(["sample", str(run2), *COMMON, *held, "--model", "gsr"])
    for arm in ("gsr", "direct"):
        main(["sample", str(run2), *COMMON, *held, *parent, "--model", arm, "--k", "8"])
        again = {str(t["id"]) for t in _lines(run2 / f"sample-{arm}" / "traces.jsonl")}
        assert again == traced | sampled, arm  # every problem run 1 traced, no other
    main(["train", str(run2), *COMMON, *parent, *train_args[:4], "--save-steps", "1"])
    for arm in ("gsr", "direct"):
        final, start = run2 / "train" / arm / "final", run / "train" / arm / "final"
        info = json.loads((final / "ponder_training.json").read_text())
        assert info["init_adapter"] == str(start) and info["global_step"] == 2
        after, before = (load_file(f / "adapter_model.safetensors") for f in (final, start))
        assert after.keys() == before.keys()
        assert any(not torch.equal(after[k], before[k]) for k in after)  # trained further
    own = _lines(run2 / "sample-direct" / "data" / "direct.jsonl")
    assert all(row in own for row in _lines(run2 / "train" / "direct" / "rows.jsonl"))
    refined = _lines(run2 / "sample-gsr" / "data" / "gsr_refine.jsonl")
    mixed2 = [r for r in _lines(run2 / "train" / "gsr" / "rows.jsonl") if r["kind"] == "gsr_refine"]
    assert refined and all(row in refined for row in mixed2)

    main(["eval", str(run2), *COMMON, *parent, *evaluation])
    assert not (run2 / "eval" / "base").exists()  # run 1's rows, reused
    report2 = json.loads((run2 / "report.json").read_text())
    assert report2["problems"] == 6
    assert set(report2["models"]) == {"base", "gsr", "direct", "parent-gsr", "parent-direct"}
    assert report2["models"]["parent-gsr"] == report["models"]["gsr"]  # run 1's own rows
    assert "gsr/refine@4 - parent-gsr/refine@4" in report2["paired"]
    assert "direct/maj@4 - parent-direct/maj@4" in report2["paired"]

    # Run 3: GRPO on the refine step from run 2's gsr adapter, on groups of its own samples.
    run3, parent2 = tmp_path / "run3", ["--parent", str(run2)]
    with pytest.raises(ValueError, match="no samples"):
        main(["grpo", str(run3), *COMMON, *parent2, "--max-steps", "1"])
    main(["sample", str(run3), *COMMON, *held, *parent2, "--model", "gsr", "--k", "8"])
    again = {str(t["id"]) for t in _lines(run3 / "sample-gsr" / "traces.jsonl")}
    assert again == traced | sampled  # run 2's problems: those its arms sampled
    few = ["--num-generations", "2", "--max-completion-length", "8", "--limit", "2"]
    main(["spread", str(run3), *COMMON, *parent2, *few, "--temperatures", "0.7", "1.3"])
    spread = json.loads((run3 / "train" / "gsr" / "spread.json").read_text())
    assert list(spread) == ["0.7", "1.3"]
    assert all(1 <= s["groups"] <= 2 and 0 <= s["mean_reward"] <= 1 for s in spread.values())
    assert all(0 <= s["groups_with_spread"] <= 1 for s in spread.values())
    grpo_args = ["--max-steps", "2", "--batch-size", "4", "--num-generations", "2"]
    main(["grpo", str(run3), *COMMON, *parent2, *grpo_args, "--max-completion-length", "8"])
    groups = _lines(run3 / "train" / "gsr" / "grpo_rows.jsonl")
    assert groups and all(r["mode"] == "gsr_refine" and len(r["candidates"]) == 4 for r in groups)
    assert all(0 < r["candidates_correct"] < 4 for r in groups)  # right and wrong candidates
    final, start = run3 / "train" / "gsr" / "final", run2 / "train" / "gsr" / "final"
    info = json.loads((final / "ponder_training.json").read_text())
    assert info["trainer"] == "grpo" and info["init_adapter"] == str(start)
    assert info["global_step"] == 2 and info["modes"] == ["gsr_refine"]
    after, before = (load_file(f / "adapter_model.safetensors") for f in (final, start))
    assert after.keys() == before.keys()  # the same adapter, trained (test_training_trainers)
    logged = _lines(run3 / "train" / "gsr" / "log.jsonl")
    assert any("rewards/correctness/mean" in entry for entry in logged)
    rollouts = _lines(run3 / "train" / "gsr" / "rollouts.jsonl")
    assert rollouts and "[" in json.dumps(rollouts[0])  # the refine prompt shows candidates
    main(["eval", str(run3), *COMMON, *parent2, *evaluation, "--models", "gsr"])
    report3 = json.loads((run3 / "report.json").read_text())
    assert set(report3["models"]) == {"gsr", "parent-gsr"}
    assert report3["models"]["parent-gsr"] == report2["models"]["gsr"]
    assert "gsr/refine@4 - parent-gsr/refine@4" in report3["paired"]
