"""The verifier report: five selectors over the same candidates, beside issue 20's
refine@k and rsa@k of the same model on the same problems and seeds.

>>> entry = conditions([{"candidate_tokens": [3, 5], "prompt_tokens": 10,
...                      "verify_prompt_tokens": 40, "single": True, "maj": False,
...                      "wmaj": True, "bon": True, "pass": True}], 2)
>>> entry["wmaj@2"]["correct"], entry["wmaj@2"]["completion"], entry["wmaj@2"]["prompt"]
([1.0], [8.0], [50.0])
>>> entry["single"]["completion"], entry["maj@2"]["prompt"]
([3.0], [10.0])
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from experiments.smollm2_verifier.stages import read_rows
from scaffolds.evaluation.problems import ProblemRow

__all__ = ["conditions", "report"]

MODEL = "gsr"
"""The shipped policy's name in issue 20's reports (``smollm2-135m-gsr`` = run 2's gsr)."""


def conditions(rows: Sequence[Mapping[str, Any]], k: int) -> dict[str, dict[str, list[float]]]:
    """Per selector: correct (0/1), generated and prompt tokens (the verifier's prompt
    tokens count for the selectors that read its scores), one entry per row."""
    labels = {
        "single": "single",
        "maj": f"maj@{k}",
        "wmaj": f"wmaj@{k}",
        "bon": f"bon@{k}",
        "pass": f"pass@{k}",
    }
    out: dict[str, dict[str, list[float]]] = {}
    for key, label in labels.items():
        entry: dict[str, list[float]] = {"correct": [], "completion": [], "prompt": []}
        for r in rows:
            tokens = r["candidate_tokens"][:1] if key == "single" else r["candidate_tokens"]
            verify = r["verify_prompt_tokens"] if key in ("wmaj", "bon") else 0
            entry["correct"].append(1.0 if r[key] else 0.0)
            entry["completion"].append(float(sum(tokens)))
            entry["prompt"].append(float(r["prompt_tokens"] + verify))
        out[label] = entry
    return out


def _final_entry(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[float]]:
    """A gsr or rsa row's own answer (``refine``): correct, and every token it spent."""
    return {
        "correct": [1.0 if r["refine"] else 0.0 for r in rows],
        "completion": [float(sum(r["candidate_tokens"]) + r["refine_tokens"]) for r in rows],
        "prompt": [
            float(r["prompt_tokens"]["candidates"] + r["prompt_tokens"]["refine"]) for r in rows
        ],
    }


def _issue20(
    run2: Path | None, ids: Sequence[str], seeds: Sequence[int], k: int
) -> dict[str, list[dict[str, list[float]]]]:
    """refine@k (gsr rows) and rsa@k (rsa rows) of issue 20's run 2, per seed, where
    every seed covers every problem."""
    out: dict[str, list[dict[str, list[float]]]] = {}
    if run2 is None:
        return out
    for folder, label in (("eval", f"refine@{k}"), ("eval-rsa", f"rsa@{k}")):
        paths = [run2 / folder / MODEL / f"seed-{s}.jsonl" for s in seeds]
        if not all(p.exists() for p in paths):
            continue
        rows = [read_rows(p) for p in paths]
        if all(i in r for r in rows for i in ids):
            out[label] = [_final_entry([r[i] for i in ids]) for r in rows]
    return out


def pairwise(rows: Sequence[Mapping[str, Any]], gold: Mapping[str, str]) -> dict[str, Any]:
    """How well the scores tell one run's candidates apart: over every (right, wrong)
    pair of candidates of the same run, the share where the right one scores higher
    (0.5: no better than chance; ties count half), and how many runs and pairs.

    >>> rows = [{"id": "a", "answers": ["4", "5", "3"], "scores": [0.9, 0.2, 0.9]}]
    >>> pairwise(rows, {"a": "4"})
    {'runs': 1, 'pairs': 2, 'right_higher': 0.75}
    """
    from experiments.smollm2_verifier.stages import _right

    wins, pairs, runs = 0.0, 0, 0
    for row in rows:
        right = [_right(a, gold[row["id"]]) for a in row["answers"]]
        good = [s for s, r in zip(row["scores"], right, strict=True) if r]
        bad = [s for s, r in zip(row["scores"], right, strict=True) if not r]
        if good and bad:
            runs += 1
            for g in good:
                for b in bad:
                    pairs += 1
                    wins += 1.0 if g > b else 0.5 if g == b else 0.0
    return {"runs": runs, "pairs": pairs, "right_higher": wins / pairs if pairs else None}


def _search(run: Path, problems: Sequence[ProblemRow]) -> dict[str, Any]:
    """The search stage's specs (one run per problem, seed 0) over the problems every
    spec finished: accuracy, generated tokens and prompt tokens (the verifier's included)."""
    from scaffolds.evaluation import stats

    files = sorted((run / "search").glob("*.jsonl")) if (run / "search").is_dir() else []
    by_spec = {}
    for path in files:
        rows = read_rows(path)
        if rows:
            by_spec[next(iter(rows.values()))["spec"]] = rows
    ids = [p.id for p in problems if all(p.id in rows for rows in by_spec.values())]
    seed = {
        spec: {
            "correct": [1.0 if rows[i]["correct"] else 0.0 for i in ids],
            "completion": [float(rows[i]["completion_tokens"]) for i in ids],
            "prompt": [
                float(rows[i]["prompt_tokens"] + rows[i]["verify_prompt_tokens"]) for i in ids
            ],
        }
        for spec, rows in by_spec.items()
    }
    return stats.condition_entries([seed]) if seed else {}


def report(
    run: Path,
    problems: Sequence[ProblemRow],
    seeds: Sequence[int],
    k: int,
    run2: Path | None = None,
) -> dict[str, Any]:
    """``RUN/report.{json,md}`` and ``RUN/accuracy_vs_tokens.png`` over the problems every
    seed finished."""
    from scaffolds.evaluation import stats

    done = [read_rows(run / "eval" / f"seed-{s}.jsonl") for s in seeds]
    ids = [p.id for p in problems if all(p.id in rows for rows in done)]
    results: dict[str, Any] = {"problems": len(ids), "seeds": list(seeds), "models": {}}
    if not ids:
        (run / "report.md").write_text("no problem finished by every seed\n")
        return results
    per_seed = [conditions([rows[i] for i in ids], k) for rows in done]
    for label, entries in _issue20(run2, ids, seeds, k).items():
        for mine, theirs in zip(per_seed, entries, strict=True):
            mine[label] = theirs
    results["models"][MODEL] = stats.condition_entries(per_seed)
    search = _search(run, problems)
    if search:
        results["models"]["search"] = search
    maj = f"{MODEL}/maj@{k}"
    pairs = [(f"{MODEL}/{c}@{k}", maj) for c in ("wmaj", "bon", "pass", "refine", "rsa")]
    pairs.append((f"{MODEL}/wmaj@{k}", f"{MODEL}/bon@{k}"))
    vote = f"majority(k={k})"
    pairs += [(f"search/{spec}", f"search/{vote}") for spec in search if spec != vote]
    stats.add_pairs(results, pairs)
    gold = {p.id: str(p.answer) for p in problems}
    results["pairwise"] = pairwise([rows[i] for rows in done for i in ids], gold)
    pair = results["pairwise"]
    table = stats.markdown(results) + (
        f"\nWithin a run, a right candidate outscores a wrong one in {pair['right_higher']:.3f}"
        f" of {pair['pairs']} (right, wrong) pairs ({pair['runs']} runs with both; 0.5 ="
        " chance, ties half).\n"
        if pair["pairs"]
        else ""
    )
    (run / "report.json").write_text(json.dumps(results) + "\n")
    (run / "report.md").write_text(table)
    markers = {
        "single": "o",
        f"maj@{k}": "^",
        f"wmaj@{k}": "s",
        f"bon@{k}": "D",
        f"pass@{k}": "*",
        f"refine@{k}": "v",
        f"rsa@{k}": "P",
    }
    title = f"smollm2-135m-gsr + trained verifier: {len(ids)} problems, seeds {list(seeds)}"
    stats.plot(results, run / "accuracy_vs_tokens.png", title=title, markers=markers)
    return results
