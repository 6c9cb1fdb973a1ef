"""``ponder train``: scaffold traces to datasets, SFT, GRPO with scaffold rollouts, verl glue.

Mounted by ``clients/cli.py`` as ``ponder train`` (``train_app``). Heavy imports (torch,
TRL) happen inside each command. Rerunning a command on the same run or output
directory resumes it.

Example::

    ponder train data runs/gsr --dataset ../shared/data/gsm8k_test.jsonl --limit 200 \\
        --engine http://127.0.0.1:8001/v1 --model qwen3-4b --scaffold 'gsr(n=4)' \\
        --direct-ratio 0.25
    ponder train sft --model Qwen/Qwen3-0.6B --data runs/gsr/data/sft.jsonl --out runs/gsr/sft
    ponder train grpo --model runs/gsr/sft/final --data problems.jsonl \\
        --mix direct=1,gsr_refine=1 --out runs/gsr/grpo
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, cast

import typer
from rich.console import Console
from rich.table import Table

__all__ = ["train_app"]

train_app = typer.Typer(
    help="Train models to use scaffolds: trace datasets, SFT, GRPO with scaffold rollouts.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True)
T = TypeVar("T")


def _fail(message: str) -> typer.Exit:
    err.print(f"[red]error:[/red] {message}")
    return typer.Exit(2)


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


PromptSetOpt = Annotated[str, typer.Option(help="prompt set: default | compact")]
ProgressOpt = Annotated[bool, typer.Option(help="show progress bars")]


@train_app.command()
def data(
    run_dir: Annotated[Path, typer.Argument(help="run directory (rerun to resume)")],
    dataset: Annotated[Path, typer.Option(help="JSONL of id/problem/answer")],
    engine: Annotated[
        str, typer.Option(help="http(s)://HOST/v1, local:DIR (or hf:DIR) or vllm:DIR")
    ],
    scaffold: Annotated[str, typer.Option("--scaffold", "-s", help="scaffold spec")] = "gsr",
    model: Annotated[str | None, typer.Option(help="model name an HTTP engine serves")] = None,
    api_key: Annotated[str | None, typer.Option(envvar="PONDER_ENGINE_API_KEY")] = None,
    prompt_set: PromptSetOpt = "default",
    chat: Annotated[
        bool | None, typer.Option("--chat/--text", help="chat messages or plain text [auto]")
    ] = None,
    samples: Annotated[int, typer.Option(min=1, help="scaffold runs per problem")] = 1,
    limit: Annotated[int | None, typer.Option(min=1, help="first N problems")] = None,
    max_tokens: Annotated[int | None, typer.Option(min=1, help="per engine call")] = None,
    temperature: Annotated[float | None, typer.Option()] = None,
    top_p: Annotated[float | None, typer.Option()] = None,
    seed: Annotated[int | None, typer.Option()] = None,
    budget_tokens: Annotated[int | None, typer.Option(min=1, help="per scaffold run")] = None,
    concurrency: Annotated[int, typer.Option(min=1, help="problems in flight")] = 8,
    kinds: Annotated[str | None, typer.Option(help="row kinds to build, comma-separated")] = None,
    sft_kinds: Annotated[str | None, typer.Option(help="kinds in data/sft.jsonl")] = None,
    direct_ratio: Annotated[
        float | None, typer.Option(help="share of direct-solve rows in the SFT mix")
    ] = None,
    gsr_keep: Annotated[str, typer.Option(help="all | all_wrong | some_right")] = "all",
    gsr_borrow: Annotated[
        bool, typer.Option(help="a wrong refinement trains toward a right sample of its problem")
    ] = False,
    rc_summaries: Annotated[str, typer.Option(help="next_correct | all")] = "next_correct",
    min_accuracy: Annotated[float, typer.Option(help="abstraction notes kept at")] = 0.5,
    grade_workers: Annotated[int, typer.Option(min=1)] = 2,
    threads: Annotated[int | None, typer.Option(help="torch threads (local: engine)")] = None,
    progress: ProgressOpt = True,
) -> None:
    """Run a scaffold over DATASET into RUN_DIR and build its SFT datasets."""
    from scaffolds.core.context import Budget
    from scaffolds.core.errors import PonderError
    from scaffolds.engines.factory import EngineOptions, engine_from_url, engine_scheme
    from scaffolds.engines.protocol import SamplingParams
    from training.collect import load_problems
    from training.pipeline import make_data
    from training.runs import RunConflictError, RunDir

    if gsr_keep not in ("all", "all_wrong", "some_right"):
        raise _fail("--gsr-keep must be all, all_wrong or some_right")
    if rc_summaries not in ("next_correct", "all"):
        raise _fail("--rc-summaries must be next_correct or all")
    try:
        problems = load_problems(dataset, limit=limit)
        scheme = engine_scheme(engine)
        options = EngineOptions(model=model, api_key=api_key, threads=threads, load=True)
        chosen = engine_from_url(engine, options)
        params = SamplingParams(
            max_tokens=max_tokens, temperature=temperature, top_p=top_p, seed=seed
        )
        budget = Budget(max_tokens=budget_tokens) if budget_tokens else None
        report = asyncio.run(
            _closing(
                chosen,
                make_data(
                    RunDir(run_dir),
                    problems,
                    chosen,
                    scaffold=scaffold,
                    samples=samples,
                    prompt_set=prompt_set,
                    chat=scheme.chat if chat is None else chat,
                    params=params,
                    budget=budget,
                    concurrency=concurrency if scheme.parallel else 1,
                    kinds=_split(kinds),
                    sft_kinds=_split(sft_kinds),
                    direct_ratio=direct_ratio,
                    gsr_keep=cast(Literal["all", "all_wrong", "some_right"], gsr_keep),
                    gsr_borrow=gsr_borrow,
                    rc_summaries=cast(Literal["next_correct", "all"], rc_summaries),
                    min_accuracy=min_accuracy,
                    grade_workers=grade_workers,
                    progress=progress,
                ),
            ),
        )
    except (OSError, ValueError, PonderError, RunConflictError) as exc:
        raise _fail(str(exc)) from None
    out.print(f"{report.records}/{report.problems} problems traced in {run_dir}")
    table = Table()
    table.add_column("dataset")
    table.add_column("rows", justify="right")
    table.add_column("file")
    for kind, count in report.counts.items():
        table.add_row(kind, str(count), str(report.paths[kind]))
    table.add_row("sft (mix)", str(report.sft_rows), str(report.paths["sft"]))
    out.print(table)
    for line in report.collected.errors[:10]:
        err.print(f"[yellow]failed[/yellow] {line}")
    if report.collected.failed:
        err.print(f"{report.collected.failed} problems failed; rerun to retry them")


def _settings(**values: Any) -> Any:
    from training.common import TrainSettings

    return TrainSettings(**values)


@train_app.command()
def sft(
    model: Annotated[str, typer.Option(help="base model: folder or hub name")],
    data: Annotated[Path, typer.Option(help="JSONL rows with prompt/completion")],
    output: Annotated[Path, typer.Option("--out", help="output folder (rerun to resume)")],
    max_steps: Annotated[int, typer.Option(help="-1: train --epochs")] = -1,
    epochs: Annotated[float, typer.Option()] = 1.0,
    batch_size: Annotated[int, typer.Option(min=1)] = 8,
    grad_accum: Annotated[int, typer.Option(min=1)] = 1,
    lr: Annotated[float, typer.Option(help="learning rate")] = 1e-5,
    warmup: Annotated[float, typer.Option(help="steps, or a fraction if < 1")] = 0.0,
    max_length: Annotated[int, typer.Option(min=1, help="tokens per row")] = 2048,
    save_steps: Annotated[int, typer.Option(min=1)] = 200,
    logging_steps: Annotated[int, typer.Option(min=1)] = 10,
    seed: Annotated[int, typer.Option()] = 0,
    prompt_set: Annotated[str | None, typer.Option(help="recorded in final/")] = None,
    cpu: Annotated[bool, typer.Option(help="train on the CPU")] = False,
    bf16: Annotated[bool, typer.Option()] = False,
    threads: Annotated[int | None, typer.Option(help="torch threads")] = None,
    lora: Annotated[bool, typer.Option("--lora", help="train LoRA adapters only")] = False,
    lora_r: Annotated[int, typer.Option(min=1, help="LoRA rank")] = 16,
    lora_alpha: Annotated[int, typer.Option(min=1, help="LoRA alpha (scale alpha/r)")] = 32,
    lora_dropout: Annotated[float, typer.Option()] = 0.0,
    lora_targets: Annotated[
        str, typer.Option(help="all-linear, or modules e.g. q,k,v,o,gate,up,down")
    ] = "all-linear",
    resume: Annotated[
        bool, typer.Option("--resume/--restart", help="continue from the newest checkpoint")
    ] = True,
    progress: ProgressOpt = True,
) -> None:
    """Supervised fine-tuning on DATA (loss on the completion only); with --lora, a LoRA
    adapter (final/ holds only the adapter). Progress also goes to OUT/train.log."""
    from training.lora import LoraSettings
    from training.runs import read_rows
    from training.sft import run_sft

    try:
        rows = read_rows(data)
        adapter = (
            LoraSettings(r=lora_r, alpha=lora_alpha, dropout=lora_dropout, targets=lora_targets)
            if lora
            else None
        )
    except (OSError, ValueError) as exc:
        raise _fail(str(exc)) from None
    settings = _settings(
        max_steps=max_steps,
        epochs=epochs,
        batch_size=batch_size,
        grad_accum=grad_accum,
        learning_rate=lr,
        warmup=warmup,
        save_steps=save_steps,
        logging_steps=logging_steps,
        seed=seed,
        bf16=bf16,
        use_cpu=cpu,
        threads=threads,
        progress=progress,
    )
    if prompt_set is None:
        from training.runs import prompt_set_of

        prompt_set = prompt_set_of(data, rows)
    final = run_sft(
        model,
        rows,
        output,
        settings,
        prompt_set=prompt_set,
        max_length=max_length,
        lora=adapter,
        resume=resume,
    )
    out.print(f"saved {final}")


@train_app.command()
def grpo(
    model: Annotated[str, typer.Option(help="policy: folder or hub name")],
    data: Annotated[Path, typer.Option(help="JSONL problems (id/problem/answer[/mode/...])")],
    output: Annotated[Path, typer.Option("--out", help="output folder (rerun to resume)")],
    mix: Annotated[str, typer.Option(help="modes by weight, e.g. direct=1,gsr_refine=1")] = (
        "direct"
    ),
    prompt_set: PromptSetOpt = "default",
    chat: Annotated[bool, typer.Option("--chat/--text", help="prompts as chat messages")] = False,
    limit: Annotated[int | None, typer.Option(min=1)] = None,
    num_generations: Annotated[int, typer.Option(min=2, help="samples per group")] = 4,
    max_completion_length: Annotated[int, typer.Option(min=1)] = 256,
    num_candidates: Annotated[int, typer.Option(min=1, help="gsr context size")] = 4,
    context_max_tokens: Annotated[int | None, typer.Option(min=1)] = None,
    summary_max_tokens: Annotated[int | None, typer.Option(min=1)] = None,
    reward: Annotated[
        list[str] | None, typer.Option("--reward", help="correctness | boxed | rubric")
    ] = None,
    judge_url: Annotated[str | None, typer.Option(help="rubric judge base URL")] = None,
    judge_model: Annotated[str | None, typer.Option()] = None,
    judge_api_key: Annotated[str | None, typer.Option(envvar="PONDER_JUDGE_API_KEY")] = None,
    rubric: Annotated[Path | None, typer.Option(help="rubric text file")] = None,
    max_steps: Annotated[int, typer.Option()] = -1,
    epochs: Annotated[float, typer.Option()] = 1.0,
    batch_size: Annotated[int, typer.Option(min=1, help="completions per device step")] = 8,
    grad_accum: Annotated[int, typer.Option(min=1)] = 1,
    lr: Annotated[float, typer.Option(help="learning rate")] = 1e-6,
    temperature: Annotated[float, typer.Option()] = 1.0,
    beta: Annotated[float, typer.Option(help="KL weight")] = 0.0,
    save_steps: Annotated[int, typer.Option(min=1)] = 100,
    logging_steps: Annotated[int, typer.Option(min=1)] = 1,
    seed: Annotated[int, typer.Option()] = 0,
    cpu: Annotated[bool, typer.Option(help="train on the CPU")] = False,
    bf16: Annotated[bool, typer.Option()] = False,
    threads: Annotated[int | None, typer.Option(help="torch threads")] = None,
    progress: ProgressOpt = True,
) -> None:
    """GRPO where each group samples one scaffold step (its MIX mode) from a shared context."""
    from training.collect import load_problems
    from training.grpo import GRPOSettings, grpo_rows, parse_mix, run_grpo
    from training.rewards import reward_functions
    from training.rollouts import RolloutSettings
    from training.runs import RunDir, read_rows

    run = RunDir(output)
    rows_path = run.data_dir / "grpo_rows.jsonl"
    try:
        if rows_path.exists():  # resume with the same modes dealt out
            rows = read_rows(rows_path)
        else:
            problems = [
                {"id": p.id, "problem": p.problem, "answer": p.answer, **p.meta}
                for p in load_problems(data, limit=limit)
            ]
            rows = grpo_rows(problems, parse_mix(mix), seed=seed, chat=chat)
            run.write_rows("grpo_rows", rows)
        funcs = reward_functions(
            reward or ["correctness"], judge_url, judge_model, judge_api_key, rubric
        )
    except (OSError, ValueError) as exc:
        raise _fail(str(exc)) from None
    settings = _settings(
        max_steps=max_steps,
        epochs=epochs,
        batch_size=batch_size,
        grad_accum=grad_accum,
        learning_rate=lr,
        save_steps=save_steps,
        logging_steps=logging_steps,
        seed=seed,
        bf16=bf16,
        use_cpu=cpu,
        threads=threads,
        progress=progress,
    )
    grpo_settings = GRPOSettings(
        num_generations=num_generations,
        max_completion_length=max_completion_length,
        temperature=temperature,
        beta=beta,
    )
    rollout = RolloutSettings(
        prompt_set=prompt_set,
        num_candidates=num_candidates,
        context_max_tokens=context_max_tokens,
        summary_max_tokens=summary_max_tokens,
    )
    try:
        final = run_grpo(model, rows, funcs, output, settings, grpo_settings, rollout)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    finally:
        for func in funcs:
            close = getattr(func, "close", None)
            if callable(close):
                close()
    out.print(f"saved {final}")


@train_app.command("verl")
def verl(
    data: Annotated[Path, typer.Option(help="JSONL problems (id/problem/answer[/mode/...])")],
    output: Annotated[Path, typer.Option("--out", help="folder for the parquet and YAML")],
    mix: Annotated[str, typer.Option(help="modes by weight")] = "direct",
    mode: Annotated[str, typer.Option(help="mode of rows that name none")] = "direct",
    prompt_set: PromptSetOpt = "default",
    num_candidates: Annotated[int, typer.Option(min=1)] = 4,
    limit: Annotated[int | None, typer.Option(min=1)] = None,
    seed: Annotated[int, typer.Option()] = 0,
) -> None:
    """Write verl's train.parquet and the agent-loop YAML for the scaffold rollout."""
    from training.collect import load_problems
    from training.grpo import grpo_rows, parse_mix
    from training.pipeline import verl_rows
    from training.verl_loop import write_agent_loop_config

    try:
        problems = [
            {"id": p.id, "problem": p.problem, "answer": p.answer, **p.meta}
            for p in load_problems(data, limit=limit)
        ]
        rows = verl_rows(grpo_rows(problems, parse_mix(mix), seed=seed))
    except (OSError, ValueError) as exc:
        raise _fail(str(exc)) from None
    from datasets import Dataset  # type: ignore[import-untyped]

    output.mkdir(parents=True, exist_ok=True)
    Dataset.from_list(rows).to_parquet(str(output / "train.parquet"))
    config = write_agent_loop_config(
        output / "agent_loop.yaml", mode=mode, prompt_set=prompt_set, num_candidates=num_candidates
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
