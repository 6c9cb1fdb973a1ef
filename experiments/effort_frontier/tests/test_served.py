"""The served study's report code on a tiny hand-made pool, its numbers worked out by
hand; and the committed served rows rebuild the committed served report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from clients.calibrate import Sample
from experiments.effort_frontier.__main__ import main
from experiments.effort_frontier.served import (
    sample_rows,
    served_markdown,
    served_report,
    served_study,
    split,
)

HERE = Path(__file__).resolve().parents[1]

IDS = [f"p{i}" for i in range(8)]
RIGHT = {"p0": True, "p1": True, "p2": True, "p3": True, "p4": False, "p5": False}
"""p6 and p7 wrong too. Every sample of a problem alike (answer, grade, 10 tokens), so
every resampled order of a pool votes the same: single = majority(k=16) per problem."""


def _pool() -> dict[str, list[Sample]]:
    return {
        pid: [Sample("1" if RIGHT.get(pid) else "2", RIGHT.get(pid, False), 10)] * 16 for pid in IDS
    }


def _rows(spec: str, correct: list[int], tokens: int) -> dict[str, dict[str, Any]]:
    held = ["p1", "p3", "p5", "p7"]
    return {
        pid: {"id": pid, "spec": spec, "correct": bool(c), "completion_tokens": tokens}
        for pid, c in zip(held, correct, strict=True)
    }


def test_split_takes_even_and_odd_positions_of_the_sorted_ids() -> None:
    assert split(IDS[::-1]) == (["p0", "p2", "p4", "p6"], ["p1", "p3", "p5", "p7"])


def test_served_levels_are_compared_with_the_pool_on_the_held_out_problems() -> None:
    cal, held = split(IDS)
    levels = {
        "minimal": _rows("single", [1, 1, 1, 0], 10),
        "high": _rows("single", [1, 1, 0, 0], 100),
        "gsr(n=4)": _rows("gsr(n=4)", [0, 1, 0, 0], 50),
    }
    r = served_study(_pool(), levels, cal, held, repeats=3)
    # calibration half: p0, p2 right, p4, p6 wrong; every spec 0.5, single the cheapest
    assert r["calibration"]["levels"] == dict.fromkeys(
        ("minimal", "low", "medium", "high"), "single"
    )
    assert r["calibration"]["fixed"]["single"] == {"accuracy": 0.5, "completion_tokens": 10.0}
    assert r["calibration"]["policy"]["minimal"] == {"spec": "single", "budget": 8192}
    # held-out half: p1, p3 right, p5, p7 wrong, whatever the spec; majority(k=16) 160 tokens
    assert r["problems"] == {"pool": 8, "calibration": 4, "held_out": 4}
    assert r["fixed"]["majority(k=16)"]["accuracy"] == 0.5
    assert r["fixed"]["majority(k=16)"]["completion_tokens"] == 160.0
    minimal, high, gsr = r["served"]
    assert (minimal["condition"], minimal["accuracy"], minimal["completion_tokens"]) == (
        "minimal",
        0.75,
        10.0,
    )
    # per problem served - resampled: 0, 0, 1, 0 -> +0.25, sd 0.5, se 0.25
    assert minimal["resampled"]["accuracy"] == 0.5
    assert minimal["vs_resampled"]["diff"] == 0.25
    assert minimal["vs_resampled"]["ci95"] == pytest.approx([0.25 - 0.49, 0.25 + 0.49])
    assert minimal["vs_baseline"]["diff"] == 0.25
    assert minimal["token_share"] == 10 / 160
    assert minimal["vs_best_fixed"]["spec"] == "single"  # the only spec at <= 10 tokens
    # high: as majority(k=16) on every problem (interval [0, 0]) at 100 / 160 of its tokens
    assert high["vs_baseline"]["ci95"] == [0.0, 0.0]
    assert high["token_share"] == 100 / 160
    # at 100 tokens: majority(k=8) (80) is the most accurate fixed spec, tied with every
    # cheaper one; the first of the tie in the specs' order wins (single)
    assert high["vs_best_fixed"]["spec"] == "single"
    # gsr(n=4) is no vote of samples: no resampled prediction, the rest as any
    assert "resampled" not in gsr
    assert gsr["vs_baseline"]["diff"] == -0.25
    assert r["goal"] == {
        "high_within_1pt_at_half_tokens": False,  # 0.625 of the tokens
        "levels_on_or_above_frontier": True,
    }
    text = served_markdown({"tiny": r})
    assert "**not met**" in text and "| minimal | `single` | 0.750" in text


def test_a_level_at_half_the_tokens_and_within_the_interval_meets_the_goal() -> None:
    cal, held = split(IDS)
    levels = {"high": _rows("majority(k=8)", [1, 1, 0, 0], 80)}
    r = served_study(_pool(), levels, cal, held, repeats=2)
    assert r["served"][0]["resampled"] == {
        "accuracy": 0.5,
        "ci95": pytest.approx([0.5 - 1.96 * (1 / 3) ** 0.5 / 2, 0.5 + 1.96 * (1 / 3) ** 0.5 / 2]),
        "completion_tokens": 80.0,
    }
    assert r["goal"] == {
        "high_within_1pt_at_half_tokens": True,
        "levels_on_or_above_frontier": True,
    }


def test_only_problems_every_condition_covers_are_compared() -> None:
    cal, held = split(IDS)
    levels = {
        "minimal": _rows("single", [1, 1, 1, 0], 10),
        "low": {k: v for k, v in _rows("single", [1, 1, 1, 0], 10).items() if k != "p7"},
    }
    r = served_study(_pool(), levels, cal, held, repeats=2)
    assert r["problems"]["held_out"] == 3
    assert r["served"][0]["accuracy"] == 1.0  # p1, p3, p5


def test_a_sample_cut_short_counts_its_forced_answer() -> None:
    trace = [
        {"type": "step_started", "step_id": "s1", "kind": "generate"},
        {
            "type": "step_finished",
            "step_id": "s1",
            "answers": ["3", None],
            "completion_tokens": [12, 256],
        },
        {
            "type": "step_started",
            "step_id": "s2",
            "kind": "force_answer",
            "parent_step": "s1",
            "sample": 1,
        },
        {"type": "step_finished", "step_id": "s2", "answers": ["4"], "completion_tokens": [5]},
        {"type": "run_finished", "answer": "3"},
    ]
    assert sample_rows({"trace": trace}) == [("3", 12), ("4", 261)]


def test_the_committed_served_report_is_rebuilt_from_its_rows(tmp_path: Path) -> None:
    seeds = [HERE / "served", HERE / "served-seed2"]  # as experiments/RESULTS.md runs it
    if not seeds[0].exists():
        pytest.skip("no served rows committed")
    folders = [str(f) for f in seeds if f.exists()]
    main(["served-report", "--served", *folders, "--out", str(tmp_path)])
    committed = HERE / "results"
    for name in ("served_report.md", "served_report.json"):
        assert (tmp_path / name).read_text() == (committed / name).read_text()


# -- several seeds ------------------------------------------------------------------------
RIGHT_B = {"p0": True, "p1": True, "p2": True, "p5": True}
"""Seed B's pool: the calibration half as seed A's (p0, p2 right), the held-out half not
(p1, p5 right; p3, p7 wrong)."""


def _write_seed(
    folder: Path, right: dict[str, bool], levels: dict[str, dict[str, dict[str, Any]]]
) -> None:
    folder.mkdir()
    with (folder / "pool-gsr.jsonl").open("w") as f:
        for pid in IDS:
            ok = right.get(pid, False)
            sample = {"answer": "1" if ok else "2", "correct": ok, "tokens": 10}
            f.write(json.dumps({"id": pid, "samples": [sample] * 16}) + "\n")
    with (folder / "levels-gsr.jsonl").open("w") as f:
        for condition, rows in levels.items():
            for row in rows.values():
                f.write(json.dumps({**row, "condition": condition}) + "\n")


def _problems(tmp_path: Path) -> Path:
    path = tmp_path / "problems.jsonl"
    path.write_text(
        "".join(json.dumps({"id": p, "problem": "?", "answer": "1"}) + "\n" for p in IDS)
    )
    return path


def test_several_seeds_are_averaged_per_problem_on_the_problems_every_seed_covers(
    tmp_path: Path,
) -> None:
    _write_seed(
        tmp_path / "a",
        RIGHT,
        {
            "minimal": _rows("single", [1, 1, 1, 0], 10),
            "high": _rows("single", [1, 1, 0, 0], 100),
            "gsr(n=4)": _rows("gsr(n=4)", [0, 1, 0, 0], 50),
        },
    )
    high_b = {k: v for k, v in _rows("single", [1, 0, 0, 0], 100).items() if k != "p7"}
    _write_seed(
        tmp_path / "b", RIGHT_B, {"minimal": _rows("single", [1, 0, 1, 1], 20), "high": high_b}
    )
    out = tmp_path / "out"
    reports = served_report([tmp_path / "a", tmp_path / "b"], _problems(tmp_path), out)
    r = reports["gsr"]
    # gsr(n=4) only in seed a: left out; p7 has no high in seed b: left out
    assert r["seeds"] == ["a", "b"]
    assert r["problems"] == {"held_out": 3}
    assert [row["condition"] for row in r["served"]] == ["minimal", "high"]
    # majority(k=16) per problem: a [1, 1, 0], b [1, 0, 1] on p1, p3, p5 -> [1, .5, .5]
    assert r["fixed"]["majority(k=16)"]["accuracy"] == pytest.approx(2 / 3)
    assert r["fixed"]["majority(k=16)"]["completion_tokens"] == 160.0
    minimal, high = r["served"]
    # minimal: a [1, 1, 1] at 10 tokens, b [1, 0, 1] at 20 -> [1, .5, 1] at 15
    assert minimal["spec"] == ["single", "single"]
    assert minimal["accuracy"] == pytest.approx(2.5 / 3)
    assert minimal["completion_tokens"] == 15.0
    # every spec votes as the pool's one answer: single resampled = majority(k=16)
    assert minimal["resampled"]["accuracy"] == pytest.approx(2 / 3)
    assert minimal["vs_resampled"]["diff"] == pytest.approx(1 / 6)  # [0, 0, .5]
    assert minimal["vs_baseline"]["diff"] == pytest.approx(1 / 6)
    # high: a [1, 1, 0], b [1, 0, 0] -> [1, .5, 0]; minus [1, .5, .5] -> [0, 0, -.5]
    assert high["accuracy"] == 0.5
    assert high["vs_baseline"]["diff"] == pytest.approx(-1 / 6)
    assert high["token_share"] == 100 / 160
    # each seed on its own, on the same three problems
    assert r["per_seed"]["a"]["served"][0]["accuracy"] == 1.0
    assert r["per_seed"]["b"]["served"][0]["accuracy"] == pytest.approx(2 / 3)
    assert r["per_seed"]["b"]["calibration"]["levels"]["high"] == "single"
    # the two pools of 16 of each problem as one of 32 (every sample 10 tokens)
    union = r["union"]
    assert (union["pool"], union["problems"]) == (32, 3)
    assert union["specs"]["majority(k=32)"]["completion_tokens"] == 320.0
    assert set(union["specs"]) == {"majority(k=16)", "majority(k=32)", "adaptive()"}
    text = (out / "served_report.md").read_text()
    assert "| minimal | `single` / `single` | 0.833" in text
    assert "### Seed `b`" in text and "32 samples a problem" in text
    assert (out / "served_accuracy_vs_tokens.png").read_bytes().startswith(b"\x89PNG")


def test_two_identical_seeds_give_one_seed_s_numbers(tmp_path: Path) -> None:
    levels = {
        "minimal": _rows("single", [1, 1, 1, 0], 10),
        "high": _rows("single", [1, 0, 0, 0], 80),
    }
    for name in ("a", "b"):
        _write_seed(tmp_path / name, RIGHT, levels)
    problems = _problems(tmp_path)
    one = served_report([tmp_path / "a"], problems, tmp_path / "one")["gsr"]
    two = served_report([tmp_path / "a", tmp_path / "b"], problems, tmp_path / "two")["gsr"]
    assert two["fixed"] == one["fixed"]
    for x, y in zip(one["served"], two["served"], strict=True):
        assert y["spec"] == [x["spec"]] * 2
        assert {k: v for k, v in y.items() if k != "spec"} == {
            k: v for k, v in x.items() if k != "spec"
        }
    assert two["goal"] == one["goal"]
    # one folder: the one-seed report as before (no seeds, no union)
    assert "seeds" not in one and two["per_seed"]["a"] == one
