"""The ``ponder train data`` pipeline and verl dataset rows.

Engines come from :func:`scaffolds.engines.factory.engine_from_url` (``--engine URL``).

:func:`make_data` runs a scaffold over problems into a run directory (resuming: solved
problems are skipped), grades every traced text in math-verify's process pool, builds
the rows of each kind (:mod:`training.data`) and writes ``data/<kind>.jsonl`` and the
SFT mix ``data/sft.jsonl``.

>>> import asyncio, tempfile
>>> from scaffolds.engines.mock import MockEngine
>>> from scaffolds.evaluation.problems import ProblemRow
>>> from training.runs import RunDir
>>> run = RunDir(tempfile.mkdtemp())
>>> engine = MockEngine(lambda r: "7" if "[" in r.prompt_text() else "5")
>>> report = asyncio.run(make_data(run, [ProblemRow("p", "3+4=", "7")], engine,
...     scaffold="gsr(n=2)", prompt_set="compact", progress=False, inline_grading=True))
>>> report.counts, report.sft_rows
({'gsr_refine': 1}, 1)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from scaffolds.engines.protocol import Engine, SamplingParams
from scaffolds.evaluation.problems import ProblemRow
from scaffolds.problem import Budget
from scaffolds.spec.build import build_strategy
from scaffolds.spec.registry import default_registry
from training.collect import CollectStats, GradeBook, collect
from training.data import build_rows, mix_rows, right_solutions, row_kinds, sft_columns
from training.rollouts import context_columns
from training.runs import RunDir, progress_bar
from training.traces import TraceRecord

__all__ = ["DataReport", "make_data", "verl_rows"]


@dataclass
class DataReport:
    collected: CollectStats
    problems: int
    records: int
    counts: dict[str, int] = field(default_factory=dict)
    sft_rows: int = 0
    paths: dict[str, Path] = field(default_factory=dict)
    grade: GradeBook | None = None
    """The verdicts on every traced text, for rows built after (``training.regroup``)."""
    empty_texts: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per step template with any: (empty texts, all its texts) of the traces."""
    sft_kinds: list[str] = field(default_factory=list)
    """The kinds chosen for ``sft.jsonl`` (besides direct rows)."""
    direct_ratio: float | None = None

    def why_no_sft_rows(self) -> list[str]:
        """Why ``sft.jsonl`` is empty, each cause in a sentence (none if it is not).

        >>> report = DataReport(CollectStats(), 2, 2, counts={"direct": 3}, direct_ratio=0.25,
        ...                     empty_texts={"gsr_refine": (2, 2)})
        >>> for reason in report.why_no_sft_rows():
        ...     print(reason.partition(":")[0])
        2 of 2 gsr_refine texts came back empty (the thinking ran to --max-tokens?)
        --direct-ratio mixes direct rows in beside the other kinds' rows, and there were none
        """
        if self.sft_rows:
            return []
        reasons = []
        if not self.counts:
            reasons.append(
                "a row is kept only when the text it trains toward is graded correct, and "
                "no traced text of this run was; try more --samples, another --temperature, "
                "an easier --dataset or a stronger model"
            )
        for template, (empty, total) in self.empty_texts.items():
            reasons.append(
                f"{empty} of {total} {template} texts came back empty (the thinking ran to "
                "--max-tokens?): an empty text is never right, so it makes no row"
            )
        direct = self.counts.get("direct", 0)
        if direct and self.direct_ratio is not None:
            reasons.append(
                "--direct-ratio mixes direct rows in beside the other kinds' rows, and there "
                f"were none: nothing to mix the {direct} direct rows into (--sft-kinds direct "
                "trains on them alone)"
            )
        elif self.counts:
            chosen = ", ".join(self.sft_kinds) or "none but direct"
            reasons.append(
                f"the kinds chosen for it ({chosen}) have no rows; rows were made of "
                f"{', '.join(self.counts)} (--sft-kinds chooses; direct rows also go in "
                "with --direct-ratio)"
            )
        return reasons


async def make_data(
    run: RunDir,
    problems: Sequence[ProblemRow],
    engine: Engine | None,
    *,
    scaffold: str,
    samples: int = 1,
    prompt_set: str = "default",
    chat: bool = False,
    params: SamplingParams | None = None,
    budget: Budget | None = None,
    concurrency: int = 8,
    kinds: Sequence[str] | None = None,
    sft_kinds: Sequence[str] | None = None,
    direct_ratio: float | None = None,
    gsr_keep: Literal["all", "all_wrong", "some_right"] = "all",
    gsr_borrow: bool = False,
    rc_summaries: Literal["next_correct", "all"] = "next_correct",
    min_accuracy: float = 0.5,
    grade_workers: int = 2,
    grade_timeout: float = 10.0,
    inline_grading: bool = False,
    seed: int = 0,
    progress: bool = True,
) -> DataReport:
    """Collect missing traces into ``run``, then (re)build every dataset from all traces
    (``engine`` may be None when every problem is traced already).

    ``sft_kinds`` go into ``data/sft.jsonl`` (default: every non-direct kind found);
    with ``direct_ratio`` that share of it is direct-solve rows (the GSR recipe),
    otherwise direct rows are added only if listed in ``sft_kinds``. ``gsr_borrow``: a
    refine whose answer is wrong still trains toward a right solution of the same problem
    (a right candidate it read, else another sample's), where the problem has one.
    """
    strategy = build_strategy(scaffold)
    run.agree(
        "data",
        {"scaffold": str(strategy), "prompt_set": prompt_set, "chat": chat, "samples": samples},
    )
    done = run.done_ids()
    todo = [p for p in problems if p.id not in done]
    stats = CollectStats()
    if todo and engine is None:
        raise ValueError(f"{len(todo)} problems are not traced yet and no engine was given")
    with progress_bar("collect", len(todo), enabled=progress and bool(todo)) as advance:
        if engine is not None and todo:
            stats = await collect(
                strategy,
                todo,
                engine,
                sink=run.append_record,
                samples=samples,
                prompt_set=prompt_set,
                chat=chat,
                params=params,
                budget=budget,
                concurrency=concurrency,
                on_progress=advance,
            )
    wanted = {p.id for p in problems}
    records = [r for r in run.records() if r.id in wanted]
    grade = await GradeBook.for_records(
        records, workers=grade_workers, timeout_s=grade_timeout, inline=inline_grading
    )
    registry = default_registry()  # once: it reads the installed entry points
    by_kind: dict[str, list[dict[str, Any]]] = {kind: [] for kind in row_kinds(registry)}
    pools = right_solutions(records, grade, registry) if gsr_borrow else {}
    lent: Counter[str] = Counter()
    for record in records:
        # Each sample of a problem borrows from a different place in its pool.
        pool = pools.get(record.id, [])
        start = lent[record.id] % len(pool) if pool else 0
        lent[record.id] += 1
        for row in build_rows(
            record,
            grade,
            kinds=kinds,
            registry=registry,
            gsr_keep=gsr_keep,
            gsr_borrow=pool[start:] + pool[:start] if gsr_borrow else None,
            rc_summaries=rc_summaries,
            min_accuracy=min_accuracy,
        ):
            by_kind[row["kind"]].append(row)
    report = DataReport(stats, len(problems), len(records), grade=grade)
    report.empty_texts = _empty_texts(records)
    for kind, rows in by_kind.items():
        if rows:
            report.counts[kind] = len(rows)
            report.paths[kind] = run.write_rows(kind, rows)
    chosen = list(sft_kinds) if sft_kinds else [k for k in report.counts if k != "direct"]
    main = [row for kind in chosen if kind != "direct" for row in by_kind.get(kind, [])]
    if direct_ratio is not None:
        mixed = mix_rows(main, by_kind["direct"], direct_ratio, seed=seed)
    else:
        mixed = main + (by_kind["direct"] if "direct" in chosen else [])
    report.sft_rows = len(mixed)
    report.sft_kinds = [kind for kind in chosen if kind != "direct"]
    report.direct_ratio = direct_ratio
    report.paths["sft"] = run.write_rows("sft", sft_columns(mixed))
    return report


def _empty_texts(records: Sequence[TraceRecord]) -> dict[str, tuple[int, int]]:
    """Per step template (else kind): how many of its traced texts were empty (or a
    helper's empty answer that the run replaced), and how many it had; only templates
    with an empty one."""
    empty: Counter[str] = Counter()
    texts: Counter[str] = Counter()
    for record in records:
        for step in record.view().steps:
            name = step.template or step.kind
            for sample, text in enumerate(step.texts):
                texts[name] += 1
                empty[name] += sample in step.substitutes or not text.strip()
    return {name: (count, texts[name]) for name, count in empty.items() if count}


def verl_rows(
    rows: Sequence[Mapping[str, Any]],
    *,
    agent_name: str = "ponder_scaffold",
    data_source: str = "ponder",
) -> list[dict[str, Any]]:
    """GRPO rows (see :func:`training.grpo.grpo_rows`) in verl's dataset layout.

    >>> verl_rows([{"prompt": "1+1=", "answer": "2", "id": "a", "mode": "direct"}])[0]["prompt"]
    [{'role': 'user', 'content': '1+1='}]
    """
    out = []
    columns = context_columns()
    for index, row in enumerate(rows):
        prompt = row["prompt"]
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        extra = {
            "id": str(row.get("id", index)),
            "mode": row.get("mode") or "direct",
            "answer": row.get("answer"),
            **{key: row.get(key) for key in columns},
        }
        out.append(
            {
                "data_source": data_source,
                "prompt": list(messages),
                "ability": "math",
                "agent_name": agent_name,
                "reward_model": {"style": "rule", "ground_truth": row.get("answer")},
                "extra_info": {"index": index, **extra},
            }
        )
    return out
