"""Reasoning Cache on list sums: trained on short lists, tested on lists 2-3x longer.

Two models from :mod:`experiments.tiny_models.rc_train` (same initialization, same training
tokens): ``rc`` learned the compact ``rc`` scaffold's steps on lists of 4-8 numbers,
``direct`` learned to write the answer at once. Each answers the same held-out test
problems of every length in ``--lengths`` under:

- ``greedy`` and ``single`` (temperature 1): one call with the problem as asked (the
  compact ``solve`` template, which is also RC's first-chunk template);
- ``rc greedy`` and ``rc`` (temperature 1): ``rc(steps=chunks needed)``, for the RC
  model only (the control never learned the chunk and summary formats).

Scaffolds run through :func:`scaffolds.solve` with the ``compact`` prompt set over
:class:`~experiments.tiny_models.batched_engine.BatchedEngine` (all problems in flight at once;
each call's sampling seeded from the run seed and problem index, and per step by the
scaffold context). Statistics as in :mod:`experiments.tiny_models.experiments`: a problem's score
is its mean over seeds; 95% CIs and paired differences are over problems.

For greedy ``rc`` every step is also checked against the oracle
(:func:`experiments.tiny_models.rc_train.oracle_reply`): where the first wrong chunk or summary
happens, by how many numbers had been read before it.

Commands::

    python -m experiments.tiny_models.rc_experiments run \
        --rc runs/rc-demo/rc --direct runs/rc-demo/direct
    python -m experiments.tiny_models.rc_experiments report \
        experiments/tiny_models/results/rc_listsum_7M.json

>>> condition_spec(RC_GREEDY, 24)
'rc(steps=12, reasoning_tokens=12, summary_tokens=4)'
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments.tiny_models.experiments import one_pass, request_seed, summarize_entry
from experiments.tiny_models.listsum_task import READ_PER_CHUNK, ListSumProblem, problems
from experiments.tiny_models.rc_report import error_table, field_table, plot, plot_steps, step_table
from experiments.tiny_models.report import RESULTS, restate
from scaffolds.evaluation.stats import add_pairs, markdown

if TYPE_CHECKING:
    from scaffolds.evaluation.loop import Job

MAX_TOKENS = 16
"""Per-call budget of ``single``: a chunk is at most 10 tokens."""
CHUNK_TOKENS, SUMMARY_TOKENS = 12, 4


@dataclass(frozen=True)
class Condition:
    """One scaffold as evaluated; ``spec`` None means rc with the steps a length needs."""

    label: str
    spec: str | None
    temperature: float

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


GREEDY = Condition("greedy", "single", 0.0)
SINGLE = Condition("single", "single", 1.0)
RC_GREEDY = Condition("rc greedy", None, 0.0)
RC = Condition("rc", None, 1.0)
CONDITIONS = {"rc": (GREEDY, SINGLE, RC_GREEDY, RC), "direct": (GREEDY, SINGLE)}


def condition_spec(condition: Condition, length: int) -> str:
    if condition.spec is not None:
        return condition.spec
    steps = -(-length // READ_PER_CHUNK)
    return f"rc(steps={steps}, reasoning_tokens={CHUNK_TOKENS}, summary_tokens={SUMMARY_TOKENS})"


def first_error(events: Sequence[Any]) -> tuple[int, str] | None:
    """(numbers read before it, step kind) of the first step whose text differs from
    the oracle's, or None if every step was right (only for one-sample runs)."""
    from experiments.tiny_models.listsum_task import state_of_chunk
    from experiments.tiny_models.rc_train import oracle_reply
    from scaffolds.core.trace import StepFinished, StepStarted

    prompts = {e.step_id: e for e in events if isinstance(e, StepStarted)}
    read = 0
    for event in events:
        if not isinstance(event, StepFinished) or event.step_id not in prompts:
            continue
        started = prompts[event.step_id]
        if started.prompt is None:
            continue
        try:
            wanted = oracle_reply(started.prompt)
        except ValueError:  # a prompt no correct run renders (cannot happen before an error)
            wanted = None
        if event.texts[0] != wanted:
            return read, started.kind
        if started.kind == "reasoning":
            item = ListSumProblem.parse(started.prompt)
            state = state_of_chunk(event.texts[0])
            read = item.length if state[0] == "=" else item.labels.index(state[0])
    return None


async def run_condition(
    engine: Any, condition: Condition, items: Sequence[ListSumProblem], *, seed: int
) -> dict[str, list[Any]]:
    """One pass of ``condition`` over ``items`` (all in flight at once, through the
    evaluation loop of :mod:`scaffolds.evaluation.loop`)."""
    from scaffolds import RunSettings, SamplingParams, solve

    async def one(job: Job[ListSumProblem]) -> dict[str, Any]:
        item = job.problem
        params = SamplingParams(
            temperature=condition.temperature,
            max_tokens=MAX_TOKENS,
            seed=None if condition.greedy else request_seed(seed, job.index),
        )
        spec = condition_spec(condition, item.length)
        result = await solve(
            spec, item.problem, engine, RunSettings(params=params, prompts="compact")
        )
        answer = result.solutions[0].answer
        usage = result.usage
        return {
            "correct": int(answer == item.answer),
            "completion_tokens": usage.completion_tokens,
            "prompt_tokens": usage.prompt_tokens,
            "first_error": first_error(result.events) if condition == RC_GREEDY else None,
        }

    keys = ("correct", "completion_tokens", "prompt_tokens", "first_error")
    return await one_pass(condition.label, items, seed, one, keys, concurrency=max(1, len(items)))


async def evaluate(
    name: str,
    model_dir: Path,
    items: Sequence[ListSumProblem],
    seeds: Sequence[int],
    *,
    greedy_only: bool = False,
) -> dict[str, Any]:
    """Every condition of ``name`` (or only its greedy ones) over ``items``."""
    from experiments.tiny_models.batched_engine import BatchedEngine

    engine = BatchedEngine(model_dir)
    out: dict[str, Any] = {}
    try:
        for condition in CONDITIONS[name]:
            if greedy_only and not condition.greedy:
                continue
            runs = [0] if condition.greedy else list(seeds)
            entry: dict[str, Any] = {"spec": condition_spec(condition, items[0].length)}
            entry |= {"temperature": condition.temperature, "seeds": runs, "wall_s": []}
            for key in ("correct", "completion_tokens", "prompt_tokens"):
                entry[key] = []
            for seed in runs:
                started = time.monotonic()
                run = await run_condition(engine, condition, items, seed=seed)
                entry["wall_s"].append(round(time.monotonic() - started, 1))
                for key in ("correct", "completion_tokens", "prompt_tokens"):
                    entry[key].append(run[key])
                if condition == RC_GREEDY:
                    entry["first_error"] = run["first_error"]
            summarize_entry(entry)
            print(
                f"{name:>6} L={items[0].length:<3} {condition.label:<15} "
                f"acc {entry['summary']['accuracy']:.3f}  wall {sum(entry['wall_s']):.0f}s",
                flush=True,
            )
            out[condition.label] = entry
    finally:
        await engine.aclose()
    return out


async def step_accuracy(
    model_dir: Path, lengths: Sequence[int], count: int
) -> dict[str, dict[str, list[int]]]:
    """Greedy accuracy of each RC step *given a correct prompt* (the oracle's trajectory):
    ``{"L=n": {"start" | "continue" | "summary": [0/1, ...]}}``. It separates a step the
    model cannot do from errors that compound along a chain."""
    from experiments.tiny_models.batched_engine import BatchedEngine
    from experiments.tiny_models.rc_train import oracle_records, rows_of_records
    from scaffolds.engines.protocol import GenerateRequest, SamplingParams

    engine = BatchedEngine(model_dir)
    out: dict[str, dict[str, list[int]]] = {}
    try:
        for length in lengths:
            items = problems("test", count, lengths=(length,), seed=1)
            rows = rows_of_records(await oracle_records(items, extra_steps=0))
            params = SamplingParams(temperature=0.0, max_tokens=CHUNK_TOKENS)
            results = await asyncio.gather(
                *(engine.generate(GenerateRequest(r["prompt"], params)) for r in rows)
            )
            scores: dict[str, list[int]] = {"start": [], "continue": [], "summary": []}
            for row, result in zip(rows, results, strict=True):
                kind = "summary" if row["kind"] == "rc_summary" else "continue"
                if row["prompt"].endswith("="):
                    kind = "start"
                text = result.completions[0].text
                scores[kind].append(int(text == row["completion"]))
                if kind != "summary":
                    for field, right in chunk_fields(row["completion"], text).items():
                        scores.setdefault(f"{kind} {field}", []).append(right)
            out[f"L={length}"] = scores
    finally:
        await engine.aclose()
    return out


def chunk_fields(want: str, got: str) -> dict[str, int]:
    """Which parts of a chunk are right, character by character at the wanted places:
    the labels and numbers it copies, the running totals it computes, and its state.

    >>> chunk_fields("b99z10;m0", "b99z19;m9")
    {'label': 1, 'number': 1, 'total': 0, 'next label': 1, 'state total': 0}
    """
    work, _, _ = want.partition(";")

    def right(index: int) -> int:
        return int(index < len(got) and got[index] == want[index])

    triples = range(0, len(work), 3)
    return {
        "label": min((right(i) for i in triples), default=1),
        "number": min((right(i + 1) for i in triples), default=1),
        "total": min((right(i + 2) for i in triples), default=1),
        "next label": right(len(work) + 1),
        "state total": right(len(work) + 2),
    }


def pairs_for(lengths: Sequence[int]) -> list[tuple[str, str]]:
    out = []
    for n in lengths:
        out += [
            (f"rc L={n}/rc greedy", f"direct L={n}/greedy"),
            (f"rc L={n}/rc", f"direct L={n}/single"),
            (f"rc L={n}/rc", f"rc L={n}/single"),
            (f"rc L={n}/rc greedy", f"rc L={n}/greedy"),
            (f"rc L={n}/rc", f"rc L={n}/rc greedy"),
        ]
    return out


def report(results: dict[str, Any], stem: str, folder: Path = RESULTS) -> None:
    """``folder/STEM.json`` (rows and statistics), ``.md`` (every table), ``.png`` and, with
    per-step diagnostics, ``STEM_steps.png``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{stem}.json").write_text(json.dumps(results) + "\n")
    text = markdown(results) + "\n" + error_table(results, RC_GREEDY.label)
    if results.get("steps"):
        text += "\n" + step_table(results["steps"]) + "\n" + field_table(results["steps"])
    (folder / f"{stem}.md").write_text(text)
    print(text)
    print(plot(results, folder / f"{stem}.png"))
    if results.get("steps"):
        print(plot_steps(results["steps"], folder / f"{stem}_steps.png"))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run")
    p.add_argument("--rc", type=Path, required=True, help="the RC-trained model")
    p.add_argument("--direct", type=Path, required=True, help="the direct-trained control")
    p.add_argument("--lengths", type=int, nargs="+", default=[8, 16, 24])
    p.add_argument("--count", type=int, default=1000, help="test problems per length")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--stem", default="rc_listsum")
    p.add_argument("--greedy-only", action="store_true", help="skip the sampled conditions")
    p.add_argument(
        "--step-problems",
        type=int,
        default=300,
        help="problems per length for the per-step accuracy (0: skip)",
    )
    st = sub.add_parser("steps", help="per-step accuracy only, added to a results JSON")
    st.add_argument("json", type=Path)
    st.add_argument("--model", type=Path, required=True)
    st.add_argument("--name", default="rc")
    st.add_argument("--lengths", type=int, nargs="+", default=[8, 16, 24])
    st.add_argument("--step-problems", type=int, default=300)
    m = sub.add_parser("merge", help="join results JSONs of the same models (other lengths)")
    m.add_argument("out", type=Path)
    m.add_argument("parts", type=Path, nargs="+")
    q = sub.add_parser(
        "report",
        aliases=["plot"],
        help="the statistics, tables and plots of a results JSON again, from its rows",
    )
    q.add_argument("json", type=Path)
    q.add_argument("--out", type=Path, help="write STEM.{json,md,png} here (default: beside it)")
    args = parser.parse_args(argv)
    if args.command in ("report", "plot"):
        results = restate(json.loads(args.json.read_text()))
        report(results, args.json.stem, args.out or args.json.parent)
        return

    import torch

    torch.set_num_threads(1)
    if args.command == "merge":
        parts = [json.loads(path.read_text()) for path in args.parts]
        results = {**parts[0], "models": {}, "steps": {}, "paired": {}, "lengths": []}
        for part in parts:
            results["models"] |= part["models"]
            results["lengths"] += part["lengths"]
            results["wall_s"] = max(results["wall_s"], part["wall_s"])
            for name, by_length in part.get("steps", {}).items():
                results["steps"].setdefault(name, {}).update(by_length)
        add_pairs(results, pairs_for(results["lengths"]))
        report(results, args.out.stem)
        return
    if args.command == "steps":
        results = json.loads(args.json.read_text())
        steps = asyncio.run(step_accuracy(args.model, args.lengths, args.step_problems))
        results.setdefault("steps", {})[args.name] = steps
        report(results, args.json.stem)
        return
    from experiments.tiny_models.rc_train import TRAIN_LENGTHS

    started = time.monotonic()
    models: dict[str, Any] = {}
    for length in args.lengths:
        items = problems("test", args.count, lengths=(length,), seed=0)
        for name, model_dir in (("rc", args.rc), ("direct", args.direct)):
            models[f"{name} L={length}"] = asyncio.run(
                evaluate(name, model_dir, items, args.seeds, greedy_only=args.greedy_only)
            )
    training = {}
    for name, model_dir in (("rc", args.rc), ("direct", args.direct)):
        info = json.loads((model_dir / "rc_train.json").read_text())
        training[name] = {k: v for k, v in info.items() if k != "example_rows"}
    results = {
        "problems": args.count,
        "lengths": list(args.lengths),
        "train_lengths": list(TRAIN_LENGTHS),
        "seeds": [] if args.greedy_only else list(args.seeds),
        "training": training,
        "models": models,
        "wall_s": round(time.monotonic() - started, 1),
    }
    if args.step_problems:
        results["steps"] = {
            "rc": asyncio.run(step_accuracy(args.rc, args.lengths, args.step_problems))
        }
    add_pairs(results, pairs_for(args.lengths))
    report(results, args.stem)


if __name__ == "__main__":
    main()
