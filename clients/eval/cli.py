"""``ponder eval``: batch evaluation of scaffolds against a Ponder (or any OpenAI) URL.

Mounted by ``clients/cli.py`` as ``ponder eval``; also runnable on its own::

    .venv/bin/ponder eval --base-url http://127.0.0.1:8000/v1 --model m \\
        --dataset gsm8k --limit 100 \\
        --scaffold single --scaffold "gsr(n=4)" --samples 4 --out runs/gsm8k
    .venv/bin/ponder eval compare runs/a/results.jsonl runs/b/results.jsonl
    .venv/bin/ponder eval make-addition --count 200 --seed 0 --out addition.jsonl
    .venv/bin/ponder eval report runs/gsm8k

Rerunning the same command resumes: finished samples are skipped, failed ones retried.
A run whose every request failed (an unknown model, an engine that is down) exits 1 with
one line naming the first error; one where some failed says how many.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer
from rich.markup import escape

from scaffolds.dependencies import require
from scaffolds.terminal import console

if TYPE_CHECKING:
    from clients.eval.served import Card
    from scaffolds.evaluation.answers import AnswerFormat, ThinkingMarkers
    from scaffolds.evaluation.grading import Grader

__all__ = ["eval_app"]

eval_app = typer.Typer(
    help="Evaluate scaffolds on a dataset: run, grade, report accuracy against compute.",
    no_args_is_help=False,
    add_completion=False,
    rich_markup_mode=None,
)
err = console(stderr=True)
UNANSWERED_SHOWN = 10
"""How many problems without an answer are named, each by its line; the rest counted."""


def _fail(message: str) -> typer.Exit:
    err.print(f"[red]error:[/red] {escape(message)}")
    return typer.Exit(2)


def _answer_format_of(card: Card | None, body: dict[str, Any]) -> str:
    """``--answer-format auto``: an ``--extra-body`` answer_format, else what the model's
    card says its answers are read as, else boxed (said on stderr)."""
    from clients.eval.served import card_answer_format

    if isinstance(body.get("answer_format"), str):
        return str(body["answer_format"])
    served = card_answer_format(card)
    said = "as the server reads this model's" if served else "the server does not say how"
    err.print(f"answers are read {served or 'boxed'} ({said}; --answer-format chooses)")
    return served or "boxed"


def _served_settings(
    base_url: str, model: str, api_key: str | None, concurrency: int | None
) -> tuple[Card | None, ThinkingMarkers, int]:
    """The model's card (one ``GET /v1/models``), the thinking markers answers are read
    after (the card's, else ``<think>``/``</think>``) and the requests in flight
    (``concurrency``, else what the server runs at once), each said on stderr."""
    from clients.eval.served import (
        DEFAULT_CONCURRENCY,
        card_concurrency,
        card_thinking,
        served_card,
    )
    from scaffolds.evaluation.answers import ThinkingMarkers

    card = asyncio.run(served_card(base_url, model, api_key))
    thinking = card_thinking(card)
    if thinking is not None and thinking != ThinkingMarkers():
        err.print(f"answers are read after {thinking.end!r}, the model's end of thinking")
    if concurrency is None:
        concurrency = card_concurrency(card)
        said = f"what {base_url} runs at once" if concurrency else "the server does not say"
        concurrency = concurrency or DEFAULT_CONCURRENCY
        err.print(f"concurrency {concurrency} ({said}; --concurrency chooses)")
    return card, thinking or ThinkingMarkers(), concurrency


def make_grader(
    kind: str,
    *,
    answer_format: AnswerFormat = "lenient",
    thinking: ThinkingMarkers | None = None,
    workers: int = 2,
    timeout_s: float = 10.0,
    judge_url: str | None = None,
    judge_model: str | None = None,
    judge_api_key: str | None = None,
    rubric: Path | None = None,
    pass_score: float = 7.0,
) -> Grader:
    """A grader by name: ``math`` (math-verify), ``exact``, or ``judge`` (needs a URL);
    the first two read a response's final answer in ``answer_format``, after ``thinking``."""
    from scaffolds.evaluation.grading import DEFAULT_RUBRIC, ExactGrader, JudgeGrader, MathGrader

    if kind == "math":
        return MathGrader(
            workers=workers, timeout_s=timeout_s, answer_format=answer_format, thinking=thinking
        )
    if kind == "exact":
        return ExactGrader(answer_format=answer_format, thinking=thinking)
    if kind == "judge":
        if not judge_url or not judge_model:
            raise _fail("--grader judge needs --judge-url and --judge-model")
        text = rubric.read_text(encoding="utf-8") if rubric else DEFAULT_RUBRIC
        return JudgeGrader(
            judge_url, judge_model, api_key=judge_api_key, rubric=text, pass_score=pass_score
        )
    raise _fail(f"--grader must be math, exact or judge (got {kind!r})")


@eval_app.callback(invoke_without_command=True)
def run(
    ctx: typer.Context,
    base_url: Annotated[
        str | None, typer.Option(help="OpenAI-compatible base URL, e.g. http://host:8000/v1")
    ] = None,
    model: Annotated[str | None, typer.Option(help="model name to request")] = None,
    dataset: Annotated[
        str | None,
        typer.Option(help="JSONL (id/problem/answer) or Batch API file; or a HF dataset"),
    ] = None,
    scaffold: Annotated[
        list[str] | None,
        typer.Option("--scaffold", "-s", help="scaffold spec, repeatable; 'none' = plain"),
    ] = None,
    samples: Annotated[int, typer.Option(min=1, help="samples per problem")] = 1,
    concurrency: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="requests in flight (default: what the server runs at once, Ponder's "
            "max_concurrent_runs from /v1/models; else 256, vLLM's default batch)",
        ),
    ] = None,
    api_key: Annotated[str | None, typer.Option(envvar="OPENAI_API_KEY")] = None,
    out: Annotated[Path | None, typer.Option(help="output folder (rerun to resume)")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="first N problems only")] = None,
    split: Annotated[str, typer.Option(help="split of a HF dataset")] = "test",
    temperature: Annotated[float | None, typer.Option()] = None,
    max_tokens: Annotated[int | None, typer.Option(min=1)] = None,
    seed: Annotated[int | None, typer.Option(help="sample i is sent with seed + i")] = None,
    template: Annotated[
        str, typer.Option(help="user message; {problem} is replaced by the problem")
    ] = "{problem}",
    trace: Annotated[bool, typer.Option(help="store each sample's trace")] = False,
    extra_body: Annotated[
        str | None, typer.Option(help='JSON merged into each request, e.g. {"budget": {...}}')
    ] = None,
    answer_format: Annotated[
        str,
        typer.Option(
            metavar="auto|boxed|lenient|boxed_anywhere|answer_is|after_answer_marker",
            help="how answers are read, by the server's votes (sent as the request's "
            "answer_format) and by the grade: boxed (only the last \\boxed{} after the "
            "thinking; none is wrong) or lenient (also 'final "
            "answer is X', '#### X', the last number), or a reference's reader: "
            "boxed_anywhere, answer_is, after_answer_marker; auto: what Ponder's /v1/models says "
            "the model uses, else boxed. Read after the end of thinking that the model's "
            "card says (thinking_markers), else </think>",
        ),
    ] = "auto",
    grader: Annotated[str, typer.Option(help="math | exact | judge")] = "math",
    grade_workers: Annotated[int, typer.Option(min=1, help="math-verify processes")] = 2,
    grade_timeout: Annotated[float, typer.Option(help="seconds per grading item")] = 10.0,
    judge_url: Annotated[str | None, typer.Option(help="judge base URL")] = None,
    judge_model: Annotated[str | None, typer.Option()] = None,
    judge_api_key: Annotated[str | None, typer.Option()] = None,
    rubric: Annotated[Path | None, typer.Option(help="rubric text file for the judge")] = None,
    pass_score: Annotated[float, typer.Option(help="judge score (0-7) that counts")] = 7.0,
    timeout: Annotated[float, typer.Option(help="seconds per request")] = 1800.0,
    max_retries: Annotated[int, typer.Option(min=0)] = 3,
    progress: Annotated[bool, typer.Option(help="show the progress bar")] = True,
) -> None:
    """Run SCAFFOLDs x SAMPLES over DATASET, grade, and write the report into OUT."""
    if ctx.invoked_subcommand is not None:
        return
    from clients.eval.pipeline import evaluate
    from clients.eval.report import print_table
    from clients.eval.resume import check_resume
    from clients.eval.runner import EvalConfig, check_specs, load_extra_body
    from clients.interrupt import INTERRUPTED_STATUS, Interrupted, run_interruptible
    from scaffolds.errors import SpecError
    from scaffolds.evaluation.answers import ANSWER_FORMATS
    from scaffolds.evaluation.problems import load_problems
    from scaffolds.evaluation.results import Record, read_results

    missing = [
        n
        for n, v in (
            ("--base-url", base_url),
            ("--model", model),
            ("--dataset", dataset),
            ("--out", out),
        )
        if not v
    ]
    if missing:
        err.print(ctx.get_help())
        raise _fail(f"missing {', '.join(missing)}")
    assert base_url and model and dataset and out
    require("eval", "ponder eval", modules=("openai", "matplotlib"))  # datasets: a hub name
    if answer_format != "auto" and answer_format not in ANSWER_FORMATS:
        said = ", ".join(("auto", *ANSWER_FORMATS))
        raise _fail(f"--answer-format must be one of {said} (got {answer_format!r})")
    try:
        specs = check_specs(scaffold or ["single"])
        body = load_extra_body(extra_body)
        loaded = load_problems(dataset, split=split, limit=limit)
    except (SpecError, ValueError) as exc:
        raise _fail(str(exc)) from None
    card, thinking, concurrency = _served_settings(base_url, model, api_key, concurrency)
    if answer_format == "auto":
        answer_format = _answer_format_of(card, body)
    fmt = cast("AnswerFormat", answer_format)
    for bad in loaded.bad:
        err.print(f"[yellow]skipped[/yellow] {dataset} {escape(str(bad))}")
    for line in loaded.unanswered[:UNANSWERED_SHOWN]:
        err.print(f"[yellow]warning[/yellow] {dataset} {escape(str(line))}")
    if len(loaded.unanswered) > UNANSWERED_SHOWN:
        more = len(loaded.unanswered) - UNANSWERED_SHOWN
        err.print(f"[yellow]warning[/yellow] {dataset}: {more} more problems have no answer")
    if not loaded.problems:
        raise _fail(f"no usable problems in {dataset}")
    try:
        config = EvalConfig(
            base_url=base_url,
            model=model,
            scaffolds=specs,
            out_dir=out,
            samples=samples,
            concurrency=concurrency,
            api_key=api_key,
            temperature=temperature,
            max_tokens=max_tokens,
            seed=seed,
            template=template,
            trace=trace,
            timeout_s=timeout,
            max_retries=max_retries,
            extra_body=body,
            answer_format=fmt,
            thinking=thinking,
        )
    except ValueError as exc:  # an --extra-body answer_format that disagrees
        raise _fail(str(exc)) from None
    previous = read_results(config.results_path)
    try:
        check_resume(config.results_path, fmt, previous.records, thinking)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    grade = make_grader(
        grader,
        answer_format=fmt,
        thinking=thinking,
        workers=grade_workers,
        timeout_s=grade_timeout,
        judge_url=judge_url,
        judge_model=judge_model,
        judge_api_key=judge_api_key,
        rubric=rubric,
        pass_score=pass_score,
    )
    for bad in previous.bad:
        err.print(f"[yellow]dropped unreadable result[/yellow] {config.results_path} {bad}")

    def stopping() -> None:
        err.print("\n[yellow]stopping[/yellow]: cancelling requests in flight (again to quit now)")

    failures: list[str] = []

    def note(record: Record) -> None:
        if record.get("error") and not failures:
            failures.append(str(record["error"]))

    try:
        outcome, report = run_interruptible(
            evaluate(
                config,
                loaded.problems,
                grade,
                dataset=dataset,
                progress=progress,
                on_record=note,
            ),
            on_first=stopping,
        )
    except Interrupted:
        kept = len(read_results(config.results_path).done())
        err.print(f"interrupted: {kept} finished samples are saved in {config.results_path};")
        err.print("rerun the same command to resume.")
        raise typer.Exit(INTERRUPTED_STATUS) from None
    if outcome.errors and not outcome.finished:
        raise _failed(base_url, outcome.errors, failures)
    print_table(report)
    err.print(
        f"{outcome.already_done} samples were already done, {outcome.finished} finished now, "
        f"{outcome.errors} failed (rerun to retry). Report: {out / 'report.md'}"
    )
    if outcome.errors:
        total = outcome.errors + outcome.finished
        first = f"; the first: {failures[0]}" if failures else ""
        err.print(
            f"[yellow]warning:[/yellow] {outcome.errors} of {total} requests failed{escape(first)}"
        )


def _failed(base_url: str, errors: int, failures: list[str]) -> typer.Exit:
    """Every request of the run failed: one line with the first error, exit 1."""
    first = f": {failures[0]}" if failures else ""
    every = "the request" if errors == 1 else f"all {errors} requests"
    said = f"{every} to {base_url} failed, none succeeded{first}"
    err.print(f"[red]error:[/red] {escape(said)}")
    return typer.Exit(1)


@eval_app.command()
def compare(
    a: Annotated[Path, typer.Argument(help="results JSONL (or output folder) A")],
    b: Annotated[Path, typer.Argument(help="results JSONL (or output folder) B")],
    json_out: Annotated[Path | None, typer.Option("--json", help="also save as JSON")] = None,
) -> None:
    """Put two runs side by side, scaffold by scaffold, with a paired per-problem count."""
    from clients.eval.compare import compare_runs, print_comparison
    from clients.eval.pipeline import clustering
    from clients.eval.report import write_json
    from scaffolds.evaluation.grading import MathGrader

    async def go() -> dict[str, Any]:
        async with clustering(MathGrader(workers=1)) as cluster:
            return await compare_runs(a, b, cluster)

    for path in (a, b):
        if not path.exists():
            raise _fail(f"no such file: {path}")
    result = asyncio.run(go())
    print_comparison(result)
    if json_out is not None:
        write_json(result, json_out)


@eval_app.command("make-addition")
def make_addition(
    out: Annotated[Path, typer.Option(help="JSONL file to write")],
    count: Annotated[int, typer.Option(min=1)] = 100,
    seed: Annotated[int, typer.Option()] = 0,
) -> None:
    """Write COUNT synthetic 3-digit addition problems (``347+589=`` -> ``936``)."""
    from scaffolds.evaluation.synthetic import write_addition

    rows = write_addition(out, count, seed=seed)
    err.print(f"wrote {rows} problems to {out}")


@eval_app.command("make-arithmetic")
def make_arithmetic(
    out: Annotated[Path, typer.Option(help="JSONL file to write")],
    count: Annotated[int, typer.Option(min=1)] = 200,
    seed: Annotated[int, typer.Option()] = 0,
) -> None:
    """Write COUNT short English arithmetic questions (``What is 7 + 15?`` -> ``22``)."""
    from scaffolds.evaluation.synthetic import arithmetic_problems, write_rows

    rows = write_rows(out, arithmetic_problems(count, seed=seed))
    err.print(f"wrote {rows} problems to {out}")


@eval_app.command()
def report(
    out: Annotated[Path, typer.Argument(help="an eval output folder")],
    grader: Annotated[str, typer.Option(help="math | exact (for maj@k clustering)")] = "math",
) -> None:
    """Rebuild the report and plots of a folder from its results.jsonl (no requests)."""
    from clients.eval.pipeline import write_reports
    from clients.eval.report import print_table

    if not (out / "results.jsonl").is_file():
        raise _fail(f"no results.jsonl in {out}")
    grade = make_grader(grader, workers=1)

    async def go() -> dict[str, Any]:
        try:
            return await write_reports(out, grade)
        finally:
            await grade.aclose()

    print_table(asyncio.run(go()))
