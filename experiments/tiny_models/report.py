"""The addition studies' results files: their statistics computed again from their rows, the
table and the plot.

A results JSON (``results/STEM.json``) holds per condition the per-problem rows (``correct``,
``completion_tokens``, ``prompt_tokens``: one list per seed) and the statistics computed from
them (``summary``, the token means, ``paired``). :func:`restate` computes the statistics
again from the rows; :func:`save` writes ``STEM.json``, ``STEM.md`` and ``STEM.png``::

    python -m experiments.tiny_models.experiments report experiments/tiny_models/results/gsr.json
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scaffolds.evaluation import stats
from scaffolds.evaluation.stats import add_pairs, markdown, per_problem, summarize
from scaffolds.evaluation.stats import mean as _mean

__all__ = ["MARKERS", "RESULTS", "plot", "restate", "save"]

RESULTS = Path(__file__).resolve().parent / "results"
MARKERS = {
    "greedy": "s",
    "single": "o",
    "majority(k=4)": "^",
    "majority(k=8)": "v",
    "gsr(n=4)": "D",
}


def restate(results: dict[str, Any]) -> dict[str, Any]:
    """Every statistic of ``results`` computed again from its per-problem rows, in place:
    each condition's ``summary`` and mean tokens, and the paired differences it names.
    Nothing else changes, so a results JSON written by a run comes back byte for byte.

    >>> entry = {"correct": [[1, 0], [1, 1]], "completion_tokens": [[2, 4], [2, 4]],
    ...          "prompt_tokens": [[5, 5], [5, 5]]}
    >>> r = restate({"models": {"m": {"a": entry, "b": dict(entry)}}, "paired": {"m/a - m/b": {}}})
    >>> r["models"]["m"]["a"]["summary"]["accuracy"], r["paired"]["m/a - m/b"]["diff"]
    (0.75, 0.0)
    """
    for conditions in results["models"].values():
        for entry in conditions.values():
            entry["summary"] = summarize(entry["correct"])
            entry["completion_tokens_mean"] = _mean(per_problem(entry["completion_tokens"]))
            entry["prompt_tokens_mean"] = _mean(per_problem(entry["prompt_tokens"]))
    if "paired" in results:
        names = list(results["paired"])
        results["paired"] = {}  # keeps its place among the keys
        add_pairs(results, [(a, b) for a, b in (name.split(" - ") for name in names)])
    return results


def plot(results: dict[str, Any], path: Path) -> Path:
    """Accuracy against generated tokens per problem, one point per model/scaffold."""
    n, seeds = results["problems"], results["seeds"]
    return stats.plot(
        results,
        path,
        title=f"3-digit addition, {n} test problems, seeds {seeds}",
        markers=MARKERS,
        xticks=(4, 8, 16, 32, 64),
    )


def save(results: dict[str, Any], stem: str, folder: Path = RESULTS) -> None:
    """``folder/STEM.json`` (the rows and their statistics), ``.md`` (the tables) and ``.png``."""
    folder.mkdir(parents=True, exist_ok=True)
    json_path = folder / f"{stem}.json"
    json_path.write_text(json.dumps(results) + "\n")
    (folder / f"{stem}.md").write_text(markdown(results))
    png = plot(results, folder / f"{stem}.png")
    print(markdown(results))
    print(f"wrote {json_path}, {png}")
