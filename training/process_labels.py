r"""Per-step labels by rollouts (Math-Shepherd, arXiv 2312.08935): ``--process``.

A graded sample's solution is split into steps at the separator the search scaffolds
write steps with (``beam``/``particle_filter``'s ``step``, ``"\n\n"`` by default). From
each step's prefix (the steps up to and including it, each followed by the separator)
the policy writes ``rollouts`` completions: ONE engine request with ``n=rollouts`` per
prefix, all prefixes in parallel. A completion reaches the gold answer when prefix +
completion, read as the eval records were graded (their ``answer_format`` and
``thinking_markers``: :func:`records_reading`, :func:`rollout_grade`), has the gold
answer. The step's label is, as the paper estimates it:

- hard: 1 when any completion reaches the gold answer, else 0;
- soft: the fraction that does.

The last step is the whole solution: its label is the sample's own grade, with no
rollout. Each step becomes one yes/no row of the verifier's own question
(:data:`~scaffolds.verifiers.generative.VERIFY_TEMPLATE`, with the prefix as the
"proposed solution"), so a step's score comes from the same yes/no head the outcome
verifier answers with. A soft label ``c/N`` becomes ``c`` "yes" rows and ``N - c`` "no"
rows (both divided by their greatest common divisor): the SFT loss over them is the
cross-entropy against the soft target.

>>> step_prefixes("a\n\nb\n\nc", "\n\n")
['a', 'a\n\nb', 'a\n\nb\n\nc']
>>> rows = step_rows("1+1?", ["a", "a\n\nb"], [0.5, 1.0], soft=True, rollouts=4)
>>> [(r["prompt"][0]["content"].split("\n")[4], r["completion"][0]["content"]) for r in rows]
[('a', 'yes'), ('a', 'no'), ('a', 'yes')]
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scaffolds.engines.protocol import (
    Engine,
    GenerateRequest,
    GenerateResult,
    Message,
    SamplingParams,
    Usage,
)
from scaffolds.evaluation.answers import AnswerFormat, ThinkingMarkers, is_correct
from scaffolds.evaluation.problems import ProblemRow
from scaffolds.evaluation.results import record_answer_format, record_thinking
from scaffolds.verifiers.generative import VERIFY_TEMPLATE, step_prefixes

__all__ = [
    "LabelledSample",
    "Sample",
    "label_samples",
    "process_samples",
    "records_reading",
    "rollout_grade",
    "step_rows",
]


@dataclass(frozen=True)
class Sample:
    """A graded sample: its problem's id, text and gold answer, its solution, its grade."""

    id: str
    problem: str
    answer: str
    solution: str
    correct: bool


@dataclass(frozen=True)
class LabelledSample:
    """A sample's step prefixes and each one's label (0..1)."""

    sample: Sample
    prefixes: tuple[str, ...]
    labels: tuple[float, ...]


def process_samples(
    records: Iterable[Mapping[str, Any]], problems: Mapping[str, ProblemRow]
) -> list[Sample]:
    """The graded samples of known problems with a gold answer and a solution (records
    that failed, are ungraded or have no text are left out)."""
    out: list[Sample] = []
    for record in records:
        problem = problems.get(str(record.get("id")))
        text = str(record.get("response") or "").strip()
        if record.get("error") or record.get("correct") is None or not text:
            continue
        if problem is None or problem.answer is None:
            continue
        out.append(
            Sample(problem.id, problem.problem, str(problem.answer), text, bool(record["correct"]))
        )
    return out


def records_reading(
    records: Iterable[Mapping[str, Any]],
) -> tuple[AnswerFormat, ThinkingMarkers]:
    """The one way the graded ``records`` read their answers (format, thinking markers),
    for the rollouts to be graded alike; ValueError when they were read several ways
    (records that do not say were read ``lenient`` after ``</think>``).

    >>> records_reading([{"correct": True, "answer_format": "boxed"}, {"error": "x"}])
    ('boxed', ThinkingMarkers(start='<think>', end='</think>'))
    >>> try:
    ...     records_reading([{"correct": True, "answer_format": "boxed"}, {"correct": False}])
    ... except ValueError as err:
    ...     print(str(err).split(" (")[1].split(")")[0])
    1 boxed after '</think>', 1 lenient after '</think>'
    """
    ways: dict[tuple[AnswerFormat, ThinkingMarkers], int] = {}
    for record in records:
        if not record.get("error") and record.get("correct") is not None:
            way = (record_answer_format(record), record_thinking(record))
            ways[way] = ways.get(way, 0) + 1
    if len(ways) > 1:
        said = ", ".join(f"{n} {fmt} after {marks.end!r}" for (fmt, marks), n in ways.items())
        raise ValueError(
            f"the graded records read their answers several ways ({said}): train on the "
            "records of one run, or regrade them one way"
        )
    return next(iter(ways), ("lenient", ThinkingMarkers()))


def rollout_grade(
    answer_format: AnswerFormat = "lenient", thinking: ThinkingMarkers | None = None
) -> Callable[[str, str], bool]:
    r"""``grade(gold, text)``: whether ``text``'s final answer, read in ``answer_format``
    after ``thinking``, is the gold answer.

    >>> markers = ThinkingMarkers("<|begin_of_thought|>", "<|end_of_thought|>")
    >>> boxed = rollout_grade("boxed", markers)
    >>> boxed("5", "so 5"), boxed("5", "<|begin_of_thought|>\\boxed{5}<|end_of_thought|>5")
    (False, False)
    >>> rollout_grade()("5", "so 5"), boxed("5", "<|end_of_thought|>\\boxed{5}")
    (True, True)
    """
    marks = thinking or ThinkingMarkers()

    def grade(gold: str, text: str) -> bool:
        answer = marks.answer(text, answer_format)
        return answer is not None and is_correct(gold, answer)

    return grade


def rollout_request(
    problem: str, prefix: str, sep: str, params: SamplingParams, *, chat: bool
) -> GenerateRequest:
    """The policy continuing ``prefix`` (then ``sep``) as its own answer to ``problem``,
    asked as ``beam`` asks for a path's next step (the problem as the user's message and
    the partial answer as the assistant's unfinished one; a text prompt: appended)."""
    if chat:
        prompt: Any = (Message("user", problem), Message("assistant", prefix + sep))
        return GenerateRequest(prompt, params, continue_final=True)
    return GenerateRequest(f"{problem}{prefix}{sep}", params)


async def label_sample(
    engine: Engine,
    sample: Sample,
    params: SamplingParams,
    *,
    sep: str = "\n\n",
    soft: bool = False,
    chat: bool = True,
    grade: Callable[[str, str], bool] | None = None,
    limit: asyncio.Semaphore | None = None,
) -> tuple[LabelledSample, Usage]:
    """``sample``'s steps labelled by ``params.n`` rollouts from each prefix but the last,
    graded by ``grade`` (default: leniently) (``limit``: requests in flight at once, over
    all samples)."""
    grade = grade or rollout_grade()
    prefixes = step_prefixes(sample.solution, sep)
    requests = [rollout_request(sample.problem, p, sep, params, chat=chat) for p in prefixes[:-1]]

    async def send(request: GenerateRequest) -> GenerateResult:
        if limit is None:
            return await engine.generate(request)
        async with limit:
            return await engine.generate(request)

    results = await asyncio.gather(*(send(r) for r in requests))
    labels: list[float] = []
    for prefix, result in zip(prefixes, results, strict=False):
        right = [grade(sample.answer, prefix + sep + c.text) for c in result.completions]
        hits = sum(right)
        labels.append(hits / len(right) if soft and right else float(hits > 0))
    labels.append(1.0 if sample.correct else 0.0)
    usage = sum((r.usage for r in results), Usage())
    return LabelledSample(sample, tuple(prefixes), tuple(labels)), usage


async def label_samples(
    engine: Engine,
    samples: Sequence[Sample],
    params: SamplingParams,
    *,
    sep: str = "\n\n",
    soft: bool = False,
    chat: bool = True,
    grade: Callable[[str, str], bool] | None = None,
    on_done: Callable[[int], None] | None = None,
    concurrency: int | None = None,
) -> tuple[list[LabelledSample], Usage]:
    """Every sample labelled, its rollouts graded by ``grade`` (default: leniently,
    :func:`rollout_grade`), at most ``concurrency`` requests in flight (None: all at
    once); ``on_done(requests)`` after each sample."""
    limit = asyncio.Semaphore(concurrency) if concurrency else None
    grade = grade or rollout_grade()

    async def one(sample: Sample) -> tuple[LabelledSample, Usage]:
        out = await label_sample(
            engine, sample, params, sep=sep, soft=soft, chat=chat, grade=grade, limit=limit
        )
        if on_done is not None:
            on_done(len(out[0].prefixes) - 1)
        return out

    done = await asyncio.gather(*(one(s) for s in samples))
    return [d[0] for d in done], sum((d[1] for d in done), Usage())


def step_rows(
    problem: str,
    prefixes: Sequence[str],
    labels: Sequence[float],
    *,
    soft: bool,
    rollouts: int,
    **fields: Any,
) -> list[dict[str, Any]]:
    """SFT rows (TRL's conversational prompt/completion, kind ``verify_step``) of one
    sample's labelled prefixes; ``fields`` are copied into every row."""
    rows: list[dict[str, Any]] = []
    for prefix, label in zip(prefixes, labels, strict=True):
        question = VERIFY_TEMPLATE.render(problem=problem, solution=prefix)
        yes = round(label * rollouts) if soft else int(label > 0)
        no = rollouts - yes if soft else 1 - yes
        common = math.gcd(yes, no) or 1
        for answer, count in (("yes", yes // common), ("no", no // common)):
            rows += [
                {
                    "prompt": [{"role": "user", "content": question}],
                    "completion": [{"role": "assistant", "content": answer}],
                    "kind": "verify_step",
                    "correct": answer == "yes",
                    "label": label,
                    **fields,
                }
                for _ in range(count)
            ]
    return rows
