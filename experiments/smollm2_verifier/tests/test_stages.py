"""The eval and search stages on a scripted engine and verifier (no vLLM): the rows
score the five selectors over the same candidates, the verifier's tokens are counted
apart, and the report pairs them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from experiments.smollm2_verifier.report import report
from experiments.smollm2_verifier.stages import Settings, eval_seed, search_rows
from scaffolds.engines.mock import MockEngine
from scaffolds.evaluation.problems import ProblemRow
from testing.scripted_verifier import ScriptedVerifier

# Two wrong "5" and one right "4" for 2+2: the vote says 5; a verifier that likes "= 4"
# makes the weighted vote and best-of-n say 4.
ENGINE = MockEngine(lambda req: ["2 + 2 = 5", "2 + 2 = 4", "2 + 2 = 5", "2 + 2 = 3"])
VERIFIER = ScriptedVerifier(lambda text: 0.9 if text.endswith("= 4") else 0.2)
PROBLEMS = [ProblemRow("a", "What is 2 + 2?", "4"), ProblemRow("b", "What is 1 + 3?", "4")]


def test_eval_rows_and_report(tmp_path: Path) -> None:
    settings = Settings(concurrency=2)
    for seed in (0, 1):
        asyncio.run(eval_seed(tmp_path, ENGINE, VERIFIER, PROBLEMS, seed, settings))
    rows = [json.loads(x) for x in (tmp_path / "eval" / "seed-0.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    row = rows[0]
    assert row["answers"] == ["5", "4", "5", "3"]
    assert row["scores"] == [0.2, 0.9, 0.2, 0.2]
    assert (row["single"], row["maj"], row["wmaj"], row["bon"], row["pass"]) == (
        False,
        False,
        True,
        True,
        True,
    )
    assert row["candidate_tokens"] == [5, 5, 5, 5]  # MockEngine counts words
    assert row["verify_prompt_tokens"] == 20  # the scripted verifier: words of the candidates
    # A rerun does nothing more: each problem once per seed.
    asyncio.run(eval_seed(tmp_path, ENGINE, VERIFIER, PROBLEMS, 0, settings))
    assert len((tmp_path / "eval" / "seed-0.jsonl").read_text().splitlines()) == 2

    asyncio.run(search_rows(tmp_path, ENGINE, VERIFIER, PROBLEMS, "majority(k=4)", settings))
    run2 = tmp_path / "issue20"  # issue 20's gsr rows of the same problems and seeds
    for seed in (0, 1):
        rows20 = [
            {
                "id": p.id,
                "candidate_tokens": [5, 5, 5, 5],
                "refine_tokens": 7,
                "prompt_tokens": {"candidates": 4, "refine": 30},
                "refine": p.id == "a",
            }
            for p in PROBLEMS
        ]
        (run2 / "eval" / "gsr").mkdir(parents=True, exist_ok=True)
        (run2 / "eval" / "gsr" / f"seed-{seed}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows20)
        )
    results = report(tmp_path, PROBLEMS, [0, 1], 4, run2)
    gsr = results["models"]["gsr"]
    assert gsr["maj@4"]["summary"]["accuracy"] == 0.0
    assert gsr["wmaj@4"]["summary"]["accuracy"] == 1.0
    assert gsr["wmaj@4"]["completion_tokens_mean"] == 20.0
    assert gsr["wmaj@4"]["prompt_tokens_mean"] == gsr["maj@4"]["prompt_tokens_mean"] + 20
    assert results["paired"]["gsr/wmaj@4 - gsr/maj@4"]["diff"] == 1.0
    assert gsr["refine@4"]["summary"]["accuracy"] == 0.5
    assert (gsr["refine@4"]["completion_tokens_mean"], gsr["refine@4"]["prompt_tokens_mean"]) == (
        27.0,
        34.0,
    )
    assert "gsr/rsa@4 - gsr/maj@4" not in results["paired"]  # no rsa rows given
    assert results["models"]["search"]["majority(k=4)"]["summary"]["accuracy"] == 0.0
    assert (tmp_path / "accuracy_vs_tokens.png").stat().st_size > 0


def test_candidates_then_the_scaffold_replayed_gives_the_live_rows(tmp_path: Path) -> None:
    """Pass 1 stores the samples, pass 2 scores each distinct sample once and replays the
    real scaffold: the rows equal those of the live run over the same samples."""
    from experiments.smollm2_verifier.replay import candidates_seed, replay_seed, score_table

    settings = Settings(concurrency=2)
    live = tmp_path / "live"
    asyncio.run(eval_seed(live, ENGINE, VERIFIER, PROBLEMS, 0, settings))
    asked = len(VERIFIER.batches)
    asyncio.run(candidates_seed(tmp_path, ENGINE, PROBLEMS, 0, settings))
    table = asyncio.run(score_table(tmp_path, VERIFIER, PROBLEMS, [0], settings))
    assert len(VERIFIER.batches) == asked + 2  # one call per problem
    assert VERIFIER.batches[-1][1] == ["2 + 2 = 3", "2 + 2 = 4", "2 + 2 = 5"]  # distinct
    asyncio.run(replay_seed(tmp_path, table, PROBLEMS, 0, settings))

    def rows(run: Path) -> dict[str, dict[str, object]]:
        lines = (run / "eval" / "seed-0.jsonl").read_text().splitlines()
        return {r["id"]: r for r in map(json.loads, lines)}

    replayed, original = rows(tmp_path), rows(live)
    for key in ("answers", "scores", "single", "maj", "wmaj", "bon", "pass"):
        assert [replayed[i][key] for i in "ab"] == [original[i][key] for i in "ab"], key
    assert replayed["a"]["candidate_tokens"] == original["a"]["candidate_tokens"]
