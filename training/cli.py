"""``ponder train``: scaffold traces to datasets, SFT, GRPO with scaffold rollouts, verl glue.

Mounted by ``clients/cli.py`` as ``ponder train`` (``train_app``). Each subcommand's
options are generated from its settings dataclass (:mod:`training.cli_settings`, by
:mod:`scaffolds.cli_options`), and the command is handed the built settings. Heavy
imports (torch, TRL) happen inside each command. Rerunning a command on the same run or
output directory resumes it. ``train data`` exits 1 when every problem it ran failed (an
unknown model, an engine that is down), naming the first error in one line.

>>> sorted(c.name or c.callback.__name__ for c in train_app.registered_commands)
['data', 'grpo', 'sft', 'status', 'verifier', 'verl']

Example (``gsm8k`` is the named set, downloaded once; or any local JSONL file)::

    .venv/bin/ponder train data runs/gsr --dataset gsm8k --limit 200 \\
        --engine http://127.0.0.1:8001/v1 --model qwen3-4b --scaffold 'gsr(n=4)' \\
        --direct-ratio 0.25
    .venv/bin/ponder train sft --model Qwen/Qwen3-0.6B --data runs/gsr/data/sft.jsonl \\
        --out runs/gsr/sft
    .venv/bin/ponder train grpo --model runs/gsr/sft/final --data examples/problems.jsonl \\
        --mix direct=1,gsr_refine=1 --out runs/gsr/grpo
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.markup import escape
from rich.table import Table

from scaffolds.cli_options import build, command_function, field_options
from scaffolds.dependencies import require
from scaffolds.terminal import console, progress
from training.cli_settings import (
    DataCommand,
    GrpoCommand,
    SftCommand,
    VerifierCommand,
    VerlCommand,
)

__all__ = ["train_app"]

train_app = typer.Typer(
    help="Train models to use scaffolds: trace datasets, SFT, GRPO with scaffold rollouts.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
out = console()
err = console(stderr=True)
T = TypeVar("T")
S = TypeVar("S")


def _fail(message: str) -> typer.Exit:
    err.print(f"[red]error:[/red] {escape(message)}", markup=True, highlight=False)
    return typer.Exit(2)


def _command(settings: type[S]) -> Callable[[Callable[[S], None]], Callable[[S], None]]:
    """Register the decorated function as the subcommand of its name, with ``settings``'
    fields as its options; it is called with the settings built from them."""
    options = field_options(settings)

    def register(run: Callable[[S], None]) -> Callable[[S], None]:
        def call(values: dict[str, Any]) -> None:
            try:
                built = build(settings, values, options)
            except ValueError as exc:  # a settings class refused a value
                raise _fail(str(exc)) from None
            run(built)

        train_app.command(name=run.__name__)(command_function(options, call, run.__doc__))
        return run

    return register


async def _closing(engine: Any, work: Awaitable[T]) -> T:
    """Await ``work``, then close ``engine`` (an in-process model's worker, HTTP clients)."""
    try:
        return await work
    finally:
        close = getattr(engine, "aclose", None)
        if close is not None:
            await close()


def _split(text: str | None) -> list[str] | None:
    return [part.strip() for part in text.split(",") if part.strip()] if text else None


@_command(DataCommand)
def data(args: DataCommand) -> None:
    """Run a scaffold over DATASET into RUN_DIR and build its SFT datasets."""
    from scaffolds.engines.factory import EngineOptions, engine_from_url, engine_scheme
    from scaffolds.engines.protocol import SamplingParams
    from scaffolds.errors import PonderError
    from scaffolds.problem import Budget
    from training.collect import read_problems
    from training.pipeline import make_data
    from training.runs import RunConflictError, RunDir

    if args.gsr_keep not in ("all", "all_wrong", "some_right"):
        raise _fail("--gsr-keep must be all, all_wrong or some_right")
    if args.rc_summaries not in ("next_correct", "all"):
        raise _fail("--rc-summaries must be next_correct or all")
    try:
        problems = read_problems(args.dataset, limit=args.limit)
        if not problems:
            raise ValueError(f"no usable problems in {args.dataset}")
        scheme = engine_scheme(args.engine)
        options = EngineOptions(
            model=args.model, api_key=args.api_key, threads=args.threads, load=True
        )
        chosen = engine_from_url(args.engine, options)
        params = SamplingParams(
            max_tokens=args.max_tokens,
            temperature=args.temperature,
            top_p=args.top_p,
            seed=args.seed,
        )
        budget = Budget(max_tokens=args.budget_tokens) if args.budget_tokens else None
        report = asyncio.run(
            _closing(
                chosen,
                make_data(
                    RunDir(args.run_dir),
                    problems,
                    chosen,
                    scaffold=args.scaffold,
                    samples=args.samples,
                    prompt_set=args.prompt_set,
                    chat=scheme.chat if args.chat is None else args.chat,
                    params=params,
                    budget=budget,
                    concurrency=args.concurrency if scheme.parallel else 1,
                    kinds=_split(args.kinds),
                    sft_kinds=_split(args.sft_kinds),
                    direct_ratio=args.direct_ratio,
                    gsr_keep=args.gsr_keep,
                    gsr_borrow=args.gsr_borrow,
                    rc_summaries=args.rc_summaries,
                    min_accuracy=args.min_accuracy,
                    grade_workers=args.grade_workers,
                    progress=args.progress,
                ),
            ),
        )
    except (OSError, ValueError, PonderError, RunConflictError) as exc:
        raise _fail(str(exc)) from None
    collected = report.collected
    if collected.failed and not collected.done:  # every problem of this run failed
        first = f": {collected.errors[0]}" if collected.errors else ""
        every = "the problem" if collected.failed == 1 else f"all {collected.failed} problems"
        err.print(f"[red]error:[/red] {escape(f'{every} failed, none traced{first}')}")
        raise typer.Exit(1)
    out.print(f"{report.records}/{report.problems} problems traced in {args.run_dir}")
    table = Table()
    table.add_column("dataset")
    table.add_column("rows", justify="right")
    table.add_column("file")
    for kind, count in report.counts.items():
        table.add_row(kind, str(count), str(report.paths[kind]))
    table.add_row("sft (mix)", str(report.sft_rows), str(report.paths["sft"]))
    out.print(table)
    if reasons := report.why_no_sft_rows():
        err.print(f"[yellow]no SFT rows[/yellow]: {escape('; '.join(reasons))}")
    for line in collected.errors[:10]:
        err.print(f"[yellow]failed[/yellow] {escape(line)}")
    if collected.failed:
        total = collected.failed + collected.done
        err.print(f"{collected.failed} of {total} problems failed; rerun to retry them")


@_command(SftCommand)
def sft(args: SftCommand) -> None:
    """Supervised fine-tuning on DATA (loss on the completion only); with --lora, a LoRA
    adapter (final/ holds only the adapter). Progress also goes to OUT/train.log."""
    require("train", "ponder train sft")
    from training.runs import check_sft_rows, prompt_set_of, read_rows
    from training.sft import run_sft

    try:
        rows = read_rows(args.data)
        check_sft_rows(args.data, rows)
    except (OSError, ValueError) as exc:
        raise _fail(str(exc)) from None
    if not rows:
        raise _fail(
            f"{args.data} has no rows to train on (`ponder train data` writes only rows "
            "graded correct; its report says why there were none)"
        )
    final = run_sft(
        args.model,
        rows,
        args.output,
        args.train,
        prompt_set=args.prompt_set or prompt_set_of(args.data, rows),
        max_length=args.max_length,
        lora=args.adapter if args.lora else None,
        resume=args.resume,
    )
    out.print(f"saved {final}")


@_command(VerifierCommand)
def verifier(args: VerifierCommand) -> None:
    """A generative verifier: SFT of a LoRA adapter on MODEL to answer yes (right) or no
    (wrong) about each graded sample of RESULTS; serve OUT/final with --verifier
    local:OUT/final, or through vLLM with the adapter."""
    require("train", "ponder train verifier")
    from scaffolds.evaluation.problems import load_problems
    from scaffolds.evaluation.results import read_results
    from training.sft import run_sft
    from training.verifier import verifier_rows

    try:
        problems = {p.id: p.problem for p in load_problems(args.problems).problems}
        if args.held_out is not None:
            held_out = {p.problem for p in load_problems(args.held_out).problems}
            problems = {i: text for i, text in problems.items() if text not in held_out}
    except (OSError, ValueError) as exc:
        raise _fail(str(exc)) from None
    loaded = read_results(args.results)
    records = loaded.records
    if args.process:
        rows = _process_rows(args, records, set(problems))
    else:
        rows = verifier_rows(
            records, problems, balance=args.balance, contrast=args.contrast, seed=args.train.seed
        )
    if not rows:
        unread = (
            f" ({len(loaded.bad)} lines unreadable: no scaffold/id/sample)" if loaded.bad else ""
        )
        raise _fail(f"no graded samples of known problems in {args.results}{unread}")
    right = sum(bool(r["correct"]) for r in rows)
    out.print(f"{len(rows)} rows: {right} right, {len(rows) - right} wrong")
    final = run_sft(
        args.model,
        rows,
        args.output,
        args.train,
        prompt_set=None,
        max_length=args.max_length,
        lora=args.adapter,
        resume=args.resume,
    )
    out.print(f"saved {final}")


def _process_rows(
    args: VerifierCommand, records: list[dict[str, Any]], kept: set[str]
) -> list[dict[str, Any]]:
    """The per-step rows of ``--process`` (samples of the ``kept`` problem ids): rollouts
    through ``--engine``, graded as the records were, with progress and an ETA."""
    from rich.progress import BarColumn, MofNCompleteColumn, TimeRemainingColumn

    from scaffolds.engines.factory import EngineOptions, engine_from_url
    from scaffolds.engines.protocol import SamplingParams
    from scaffolds.errors import PonderError
    from scaffolds.evaluation.problems import load_problems
    from scaffolds.verifiers.generative import step_prefixes
    from training import process_labels as labels
    from training.verifier import balanced

    if not args.engine:
        raise _fail("--process needs --engine (the policy, for the rollouts)")
    sep = args.step.encode("latin-1", "backslashreplace").decode("unicode_escape")
    try:
        known = {p.id: p for p in load_problems(args.problems).problems if p.id in kept}
        graded = (r for r in records if str(r.get("id")) in known)
        answer_format, thinking = labels.records_reading(graded)
        engine = engine_from_url(
            args.engine,
            EngineOptions(
                model=args.engine_model, api_key=args.engine_api_key, threads=args.train.threads
            ),
        )
    except (OSError, ValueError) as exc:
        raise _fail(str(exc)) from None
    samples = labels.process_samples(records, known)
    out.print(f"rollouts graded {answer_format} after {thinking.end!r}, as the records were")
    params = SamplingParams(
        n=args.rollouts, max_tokens=args.rollout_max_tokens, temperature=args.temperature
    )
    total = sum(len(step_prefixes(s.solution, sep)) - 1 for s in samples)
    columns = ("{task.description}", BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with progress(*columns, console=err, disable=not args.train.progress) as bar:
        task = bar.add_task("rollouts (requests)", total=total)
        try:
            labelled, usage = asyncio.run(
                _closing(
                    engine,
                    labels.label_samples(
                        engine,
                        samples,
                        params,
                        sep=sep,
                        soft=args.soft,
                        chat=args.chat,
                        grade=labels.rollout_grade(answer_format, thinking),
                        on_done=lambda k: bar.advance(task, k),
                        concurrency=args.concurrency,
                    ),
                )
            )
        except PonderError as exc:
            raise _fail(f"the rollouts failed: {exc}") from None
    out.print(
        f"{total} rollout requests (n={args.rollouts}): {usage.prompt_tokens} prompt and "
        f"{usage.completion_tokens} completion tokens"
    )
    rows = [
        row
        for item in labelled
        for row in labels.step_rows(
            item.sample.problem,
            item.prefixes,
            item.labels,
            soft=args.soft,
            rollouts=args.rollouts,
            id=item.sample.id,
        )
    ]
    return balanced(rows, seed=args.train.seed) if args.balance else rows


@_command(GrpoCommand)
def grpo(args: GrpoCommand) -> None:
    """GRPO where each group samples one scaffold step (its MIX mode) from a shared context."""
    require("train", "ponder train grpo")
    from training.grpo import run_grpo
    from training.rewards import reward_functions
    from training.runs import RunDir, read_rows

    run = RunDir(args.output)
    rows_path = run.data_dir / "grpo_rows.jsonl"
    try:
        if rows_path.exists():  # resume with the same modes dealt out
            rows = read_rows(rows_path)
        else:
            rows = args.problems.rows(seed=args.train.seed, chat=args.chat)
            run.write_rows("grpo_rows", rows)
        funcs = reward_functions(
            list(args.reward or ("correctness",)),
            args.judge_url,
            args.judge_model,
            args.judge_api_key,
            args.rubric,
        )
    except (OSError, ValueError) as exc:
        raise _fail(str(exc)) from None
    try:
        final = run_grpo(args.model, rows, funcs, args.output, args.train, args.grpo, args.rollout)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    finally:
        for func in funcs:
            close = getattr(func, "close", None)
            if callable(close):
                close()
    out.print(f"saved {final}")


@_command(VerlCommand)
def verl(args: VerlCommand) -> None:
    """Write verl's train.parquet and the agent-loop YAML for the scaffold rollout."""
    require("train", "ponder train verl", modules=("datasets",))
    from training.pipeline import verl_rows
    from training.verl_loop import write_agent_loop_config

    try:
        rows = verl_rows(args.problems.rows(seed=args.seed))
    except (OSError, ValueError) as exc:
        raise _fail(str(exc)) from None
    from datasets import Dataset  # type: ignore[import-untyped]

    output = args.output
    output.mkdir(parents=True, exist_ok=True)
    Dataset.from_list(rows).to_parquet(str(output / "train.parquet"))
    config = write_agent_loop_config(
        output / "agent_loop.yaml",
        mode=args.rollout.default_mode,
        prompt_set=args.rollout.prompt_set,
        num_candidates=args.rollout.num_candidates,
    )
    out.print(f"wrote {output / 'train.parquet'} ({len(rows)} rows) and {config}")
    out.print(
        "run verl with: actor_rollout_ref.rollout.mode=async "
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={config} "
        f"data.train_files={output / 'train.parquet'}"
    )


@train_app.command()
def status(run_dir: Annotated[Path, typer.Argument(help="run or output directory")]) -> None:
    """What a run directory holds: traces, datasets, checkpoints, the final model."""
    from training.runs import RunDir, last_checkpoint

    if not run_dir.is_dir():
        raise _fail(f"{run_dir} is not a directory")
    run = RunDir(run_dir)
    config = run.config()
    if config:
        out.print_json(json.dumps(config))
    if run.traces_path.exists():
        out.print(f"traces: {sum(1 for _ in run.records())} problems")
    for path in sorted(run.data_dir.glob("*.jsonl")) if run.data_dir.exists() else []:
        with path.open(encoding="utf-8") as handle:
            out.print(f"data/{path.name}: {sum(1 for line in handle if line.strip())} rows")
    for folder in (run_dir, run_dir / "sft", run_dir / "grpo"):
        checkpoint = last_checkpoint(folder)
        if checkpoint:
            out.print(f"last checkpoint: {checkpoint}")
        if (folder / "final").is_dir():
            out.print(f"final model: {folder / 'final'}")
