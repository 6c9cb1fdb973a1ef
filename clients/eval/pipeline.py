"""Run, then report: the whole ``ponder eval`` in one call.

>>> import asyncio, tempfile, pathlib
>>> from scaffolds.evaluation.grading import ExactGrader
>>> out = pathlib.Path(tempfile.mkdtemp())
>>> report = asyncio.run(write_reports(out, ExactGrader()))  # no results yet: empty report
>>> report["scaffolds"], sorted(p.name for p in out.iterdir())
([], ['report.json', 'report.md'])
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from clients.eval.plots import write_plots
from clients.eval.report import Cluster, markdown_report, summarize, write_json
from clients.eval.resume import run_formats, run_thinking
from clients.eval.runner import EvalConfig, run_eval
from scaffolds.evaluation.answer_pool import AnswerChecker
from scaffolds.evaluation.grading import Grader, MathGrader
from scaffolds.evaluation.loop import RunOutcome
from scaffolds.evaluation.problems import ProblemRow
from scaffolds.evaluation.results import Record, read_results

__all__ = ["clustering", "evaluate", "write_reports"]


@contextlib.asynccontextmanager
async def clustering(grader: Grader) -> AsyncIterator[Cluster]:
    """The grader's answer clustering (maj@k), or a fresh math-verify pool's."""
    if isinstance(grader, MathGrader):
        yield grader.cluster
        return
    checker = AnswerChecker(max_workers=1)
    try:
        yield checker.cluster
    finally:
        checker.close()


async def write_reports(
    out_dir: Path,
    grader: Grader,
    *,
    config: EvalConfig | None = None,
    problems: Sequence[ProblemRow] | None = None,
    info: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Summarize ``out_dir/results.jsonl`` into ``report.json``, ``report.md`` and PNGs.

    With ``config`` and ``problems``, only this run's scaffolds, problems and samples
    count (a results file may hold more from other runs).
    """
    records: list[Record] = read_results(out_dir / "results.jsonl").records
    scaffolds: list[str] | None = None
    if config is not None:
        scaffolds = config.scaffolds
        ids = {p.id for p in problems} if problems is not None else None
        records = [
            r
            for r in records
            if r["scaffold"] in scaffolds
            and (ids is None or r["id"] in ids)
            and int(r["sample"]) < config.samples
        ]
    if info is None:  # rebuilding from the file alone: say what model it holds, how graded
        models = sorted({str(r.get("model")) for r in records if r.get("model")})
        info = {"model": ", ".join(models), "grader": grader.name} if models else None
        if info is not None:
            info["answer_format"] = run_formats(records)
            info["thinking_markers"] = run_thinking(records)
    async with clustering(grader) as cluster:
        report = await summarize(records, cluster, scaffolds=scaffolds, info=info)
    plots = write_plots(report, out_dir)
    report["files"] = {
        "results": "results.jsonl",
        "report_md": "report.md",
        "plots": [p.name for p in plots],
    }
    write_json(report, out_dir / "report.json")
    markdown = markdown_report(report, [p.name for p in plots])
    (out_dir / "report.md").write_text(markdown, encoding="utf-8")
    return report


async def evaluate(
    config: EvalConfig,
    problems: Sequence[ProblemRow],
    grader: Grader,
    *,
    dataset: str = "",
    progress: bool = True,
    console: Console | None = None,
    on_record: Callable[[Record], None] | None = None,
) -> tuple[RunOutcome, dict[str, Any]]:
    """Run every pending sample, then write the report; the grader is closed at the end."""
    try:
        outcome = await run_eval(
            config, problems, grader, progress=progress, console=console, on_record=on_record
        )
        info = {
            "model": config.model,
            "base_url": config.base_url,
            "dataset": dataset,
            "problems": len(problems),
            "samples": config.samples,
            "grader": grader.name,
            "answer_format": config.answer_format,
            "thinking_markers": config.thinking.as_dict(),
        }
        report = await write_reports(
            config.out_dir, grader, config=config, problems=problems, info=info
        )
    finally:
        await grader.aclose()
    return outcome, report
