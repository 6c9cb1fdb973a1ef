"""Where a GSR-trained addition model's refine step goes wrong (issue 20's diagnosis).

Runs ``gsr(n=4)`` through :func:`scaffolds.solve` over LocalEngine (chat, compact set,
temperature 1.0, request seed = problem index), records each run's candidates and the
token ids LocalEngine fed the refine call, then on the same refine prompts measures:
whether those ids equal the ids :func:`experiments.tiny_models.gsr_train.encode_rows` trains on,
greedy refinement, the teacher-forced log-probability of the right answer (and EOS)
under the refine prompt and under the direct prompt, the vote over the same
candidates, and greedy refinement by how many candidates are right. Prints JSON.

Command::

    python -m experiments.tiny_models.refine_diag runs/gsr-before/gsr --count 300
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.tiny_models.tokenizer import EOS, vocabulary
from scaffolds.engines.protocol import GenerateRequest, GenerateResult
from scaffolds.evaluation.addition_task import AdditionProblem, problems


class Recording:
    """An engine wrapper that keeps every request with its result."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.calls: list[tuple[GenerateRequest, GenerateResult]] = []

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        result: GenerateResult = await self.engine.generate(request)
        self.calls.append((request, result))
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


async def served_runs(model_dir: Path, items: Sequence[AdditionProblem]) -> list[dict[str, Any]]:
    """gsr(n=4) on each problem as the experiments serve it, with what each call got."""
    from scaffolds import RunSettings, SamplingParams, solve
    from scaffolds.engines.local import LocalEngine

    engine = LocalEngine(model_dir, threads=1)
    out = []
    try:
        for index, item in enumerate(items):
            recording = Recording(engine)
            params = SamplingParams(temperature=1.0, max_tokens=8, seed=index)
            result = await solve(
                "gsr(n=4)", item.problem, recording, RunSettings(params=params, prompts="compact")
            )
            (_, drawn), (request, refined) = recording.calls
            out.append(
                {
                    "candidates": [c.text for c in drawn.completions],
                    "refine_ids": list(refined.prompt_token_ids or ()),
                    "refine_temperature": request.params.temperature,
                    "answer": result.solutions[0].answer,
                    "gold": item.answer,
                }
            )
    finally:
        await engine.aclose()
    return out


def diagnose(model_dir: Path, count: int) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM

    from experiments.tiny_models.gsr_train import encode_rows, refine_rows

    torch.set_num_threads(1)
    items = problems("test", count, seed=0)
    runs = asyncio.run(served_runs(model_dir, items))
    model: Any = AutoModelForCausalLM.from_pretrained(str(model_dir))  # as LocalEngine loads it
    model.eval()
    vocab = vocabulary()
    chars = {i: t for t, i in vocab.items()}

    def greedy(ids: list[int]) -> str:
        x, text = torch.tensor([ids]), ""
        with torch.no_grad():
            for _ in range(8):
                token = int(model(input_ids=x).logits[0, -1].argmax())
                if token == vocab[EOS]:
                    break
                text += chars[token]
                x = torch.cat([x, torch.tensor([[token]])], 1)
        return text

    def logp(prompt: list[int], answer: str) -> float:
        ids = prompt + [vocab[c] for c in answer] + [vocab[EOS]]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0].float()
        lp = torch.log_softmax(logits, -1)
        return sum(float(lp[j - 1, ids[j]]) for j in range(len(prompt), len(ids)))

    def mean(xs: Sequence[float]) -> float:
        return sum(xs) / len(xs)

    rows = refine_rows(items, [r["candidates"] for r in runs])
    trained_ids = [encode_rows([row])[0][0, : len(row["prompt"])].tolist() for row in rows]
    refined = [greedy(r["refine_ids"]) for r in runs]
    by_right: dict[int, list[bool]] = collections.defaultdict(list)
    for text, r in zip(refined, runs, strict=True):
        by_right[sum(c == r["gold"] for c in r["candidates"])].append(text == r["gold"])
    direct = [[vocab[c] for c in item.problem] for item in items]
    return {
        "model": str(model_dir),
        "problems": count,
        "train ids == served ids": mean(
            [t == r["refine_ids"] for t, r in zip(trained_ids, runs, strict=True)]
        ),
        "refine temperatures": sorted({r["refine_temperature"] for r in runs}),
        "refine@4 served": mean([r["answer"] == r["gold"] for r in runs]),
        "refine greedy, same prompts": mean(
            [t == r["gold"] for t, r in zip(refined, runs, strict=True)]
        ),
        "one candidate": mean([c == r["gold"] for r in runs for c in r["candidates"]]),
        "vote over the candidates": mean(
            [collections.Counter(r["candidates"]).most_common(1)[0][0] == r["gold"] for r in runs]
        ),
        "greedy direct": mean([greedy(d) == i.answer for d, i in zip(direct, items, strict=True)]),
        "logp(gold | refine prompt)": mean([logp(r["refine_ids"], r["gold"]) for r in runs]),
        "logp(gold | direct prompt)": mean(
            [logp(d, i.answer) for d, i in zip(direct, items, strict=True)]
        ),
        "refine greedy by right candidates": {
            k: {"problems": len(v), "accuracy": mean(v)} for k, v in sorted(by_right.items())
        },
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("model", type=Path)
    parser.add_argument("--count", type=int, default=300)
    args = parser.parse_args(argv)
    print(json.dumps(diagnose(args.model, args.count), indent=1))


if __name__ == "__main__":
    main()
