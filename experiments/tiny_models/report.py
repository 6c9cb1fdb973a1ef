"""The addition studies' results files: their statistics computed again from their rows, the
table and the plot.

A results JSON (``results/STEM.json``) holds per condition the per-problem rows (``correct``,
``completion_tokens``, ``prompt_tokens``: one list per seed) and the statistics computed from
them (``summary``, the token means, ``paired``). :func:`restate` computes the statistics
again from the rows; :func:`save` writes ``STEM.json``, ``STEM.md`` and ``STEM.png``::

    python -m experiments.tiny_models.experiments report experiments/tiny_models/results/gsr.json

:func:`compare` pairs models of different results files on the same problems and seeds
(Part 2b's after - before) and writes ``STEM.{json,md}`` (:func:`save_comparison`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from scaffolds.evaluation import stats
from scaffolds.evaluation.stats import add_pairs, markdown, per_problem, summarize
from scaffolds.evaluation.stats import mean as _mean

__all__ = [
    "MARKERS",
    "RESULTS",
    "across",
    "compare",
    "compare_markdown",
    "plot",
    "restate",
    "save",
    "save_comparison",
]

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


def across(
    models: Mapping[str, Mapping[str, Any]], pairs: Sequence[tuple[str, str]]
) -> dict[str, Any]:
    """Paired differences between models of different results files, on the same problems
    and seeds: ``models`` maps a name to one model's conditions (with their rows), ``pairs``
    are ``("NAME/cond", "NAME/cond")``. Each condition a pair names gets its ``summary``
    and mean tokens, computed from its rows; the rows stay in their own files.

    >>> entry = {"correct": [[1, 0], [1, 1]], "completion_tokens": [[2, 4], [2, 4]],
    ...          "prompt_tokens": [[5, 5], [5, 5]]}
    >>> low = dict(entry, correct=[[0, 0], [1, 0]])
    >>> r = across({"after": {"a": entry}, "before": {"a": low}}, [("after/a", "before/a")])
    >>> r["models"]["before"]["a"]["summary"]["accuracy"], r["paired"]["after/a - before/a"]["diff"]
    (0.25, 0.5)
    """
    named = [side.split("/", 1) for pair in pairs for side in pair]
    used: dict[str, dict[str, Any]] = {}
    for model, condition in named:
        if condition not in models.get(model, {}):
            raise KeyError(f"{model}/{condition}: no such model and condition")
        entry = models[model][condition]
        used.setdefault(model, {})[condition] = {
            "summary": summarize(entry["correct"]),
            "completion_tokens_mean": _mean(per_problem(entry["completion_tokens"])),
            "prompt_tokens_mean": _mean(per_problem(entry["prompt_tokens"])),
        }
    rows = {"models": {m: dict(models[m]) for m in used}}
    add_pairs(rows, pairs)
    return {"models": used, "paired": rows["paired"]}


def compare(spec: Mapping[str, Any], folder: Path) -> dict[str, Any]:
    """:func:`across` for the models ``spec["sources"]`` names, each a model of a results
    file in ``folder`` (``{"after": {"file": "gsr_after_300.json", "model": "gsr"}}``), and
    the pairs ``spec["paired"]`` names (``"after/gsr(n=4) - before/gsr(n=4)"``). The files
    must hold the same problems and seeds. ``spec`` may be an earlier output: it comes back
    byte for byte. Rebuild the committed one with::

        python -m experiments.tiny_models.experiments compare \\
            experiments/tiny_models/results/part2b_pairs.json
    """
    sources = dict(spec["sources"])
    loaded = {s["file"]: json.loads((folder / s["file"]).read_text()) for s in sources.values()}
    same = {(r["problems"], r.get("problem_seed"), tuple(r["seeds"])) for r in loaded.values()}
    if len(same) != 1:
        raise ValueError(f"the files hold other problems or seeds: {sorted(same)}")
    ((problems, _, seeds),) = same
    models = {name: loaded[s["file"]]["models"][s["model"]] for name, s in sources.items()}
    pairs = [(a, b) for a, b in (name.split(" - ") for name in spec["paired"])]
    out = {"sources": sources, "problems": problems, "seeds": list(seeds)}
    return out | across(models, pairs)


def compare_markdown(results: Mapping[str, Any]) -> str:
    """What each name stands for, then :func:`~scaffolds.evaluation.stats.markdown`'s tables."""
    names = ", ".join(
        f"{name} = {s['file']} ({s['model']})" for name, s in results["sources"].items()
    )
    head = f"Paired across results files ({results['problems']} problems, seeds "
    head += f"{results['seeds']}): {names}.\n\n"
    return head + markdown(results)


def save_comparison(results: Mapping[str, Any], stem: str, folder: Path = RESULTS) -> None:
    """``folder/STEM.json`` (the sources, the pairs and their statistics) and ``STEM.md``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{stem}.json").write_text(json.dumps(results) + "\n")
    (folder / f"{stem}.md").write_text(compare_markdown(results))
    print(compare_markdown(results))
    print(f"wrote {folder / f'{stem}.json'}, {folder / f'{stem}.md'}")
