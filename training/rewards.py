r"""Rewards for RL on scaffold steps, in TRL's reward-function form.

A reward function is called as ``r(prompts=..., completions=..., **columns)`` and returns
one ``float`` per completion, or ``None`` where it cannot judge (TRL then leaves the
sample out of that reward). Completions are strings, or chat messages for
conversational datasets.

- :class:`CorrectnessReward`: 1.0 when the completion's final answer matches the row's
  gold ``answer``, else 0.0; ``None`` when the row has no answer. It grades with
  ``ponder eval``'s grader (:class:`scaffolds.evaluation.grading.MathGrader`: math-verify
  in a process pool under a time limit), so the reward is the eval metric, and a
  pathological answer can neither hang training nor trip math-verify's main-thread-only
  signal timeouts.
- :class:`RubricReward`: a judge grades the completion on a 0..``max_score`` rubric
  (QED-Nano grades proofs 0-7); the score is normalized to [0, 1]. The prompt, the default
  rubric and the reading of the reply are ``ponder eval``'s judge's
  (:mod:`scaffolds.evaluation.grading`). The judge is any callable ``prompt -> reply``
  (sync or async); :func:`openai_judge` makes one for an OpenAI-compatible endpoint.
- :func:`boxed_reward`: 1.0 when a ``\boxed{}`` answer is present (a format reward).

>>> reward = CorrectnessReward(inline=True)
>>> reward(completions=["so \\boxed{4}", "it is 5", "x"], answer=["4", "4", None])
[1.0, 0.0, None]
>>> judge = lambda prompt: "Mostly right. <score>6</score>"
>>> RubricReward(judge)(completions=["a proof"], prompts=["Show that ..."])
[0.8571428571428571]
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

from scaffolds.evaluation.answers import extract_boxed
from scaffolds.evaluation.grading import (
    DEFAULT_RUBRIC,
    JUDGE_TEMPLATE,
    MathGrader,
    judge_prompt,
    parse_score,
)
from scaffolds.evaluation.problems import ProblemRow

__all__ = [
    "CorrectnessReward",
    "RubricReward",
    "boxed_reward",
    "completion_text",
    "openai_judge",
    "reward_functions",
    "run_sync",
]

T = TypeVar("T")

Judge = Callable[[str], str | Awaitable[str]]
"""Takes the judge prompt, returns the judge's reply text."""


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion from sync code, even under a running event loop
    (then in a helper thread with its own loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name="ponder-run-sync")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    result: T = box["value"]
    return result


def completion_text(completion: Any) -> str:
    """The text of a completion: a string, or the content of chat messages.

    >>> completion_text([{"role": "assistant", "content": "42"}]), completion_text(None)
    ('42', '')
    """
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content") or "")
    if isinstance(completion, Sequence):
        return "".join(completion_text(part) for part in completion)
    return str(completion)


def _column(kwargs: dict[str, Any], key: str, count: int) -> list[Any]:
    value = kwargs.get(key)
    if isinstance(value, list | tuple):
        return list(value) + [None] * (count - len(value))
    return [value] * count


class CorrectnessReward:
    """1.0 / 0.0 by answer correctness against the ``answer_key`` column (None if absent).

    ``inline=True`` grades on the calling thread (fine for tests and trusted answers);
    otherwise a pool of ``workers`` processes grades with ``timeout_s`` per answer, and a
    timed-out answer counts as wrong. Call :meth:`close` (or use ``with``) to end the pool.
    """

    def __init__(
        self,
        *,
        answer_key: str = "answer",
        workers: int = 2,
        timeout_s: float = 10.0,
        inline: bool = False,
    ) -> None:
        self.__name__ = "correctness"
        self.answer_key = answer_key
        self.grader = MathGrader(workers=workers, timeout_s=timeout_s, inline=inline)

    def __call__(self, completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        golds = _column(kwargs, self.answer_key, len(completions))
        texts = [completion_text(c) for c in completions]
        return run_sync(self.grade(golds, texts))

    async def grade(self, golds: Sequence[str | None], texts: Sequence[str]) -> list[float | None]:
        async def one(gold: Any, text: str) -> float | None:
            if gold is None or (isinstance(gold, str) and not gold.strip()):
                return None
            if not text.strip():
                return 0.0
            grade = await self.grader.grade(ProblemRow("", "", str(gold)), text)
            return 1.0 if grade.correct else 0.0

        return list(await asyncio.gather(*(one(g, t) for g, t in zip(golds, texts, strict=True))))

    def close(self) -> None:
        self.grader.close()

    def __enter__(self) -> CorrectnessReward:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def boxed_reward(completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
    r"""1.0 if the completion has a non-empty ``\boxed{}``, else 0.0.

    >>> boxed_reward(["\\boxed{3}", "3", [{"role": "assistant", "content": "\\boxed{}"}]])
    [1.0, 0.0, 0.0]
    """
    return [1.0 if extract_boxed(completion_text(c)) else 0.0 for c in completions]


class RubricReward:
    """A judge's rubric grade, normalized to [0, 1]; None when the judge gives no grade.

    The judge prompt is :func:`~scaffolds.evaluation.grading.judge_prompt` with ``template``
    (a ``string.Template``: ``$problem``, ``$reference``, ``$rubric``, ``$response``,
    ``$max_score``). The problem comes from the ``problem_key`` column if present, else
    from the prompt; the reference from the first of ``reference_keys`` that a row has.
    A judge that raises counts as None.
    """

    def __init__(
        self,
        judge: Judge,
        *,
        rubric: str = DEFAULT_RUBRIC,
        max_score: float = 7.0,
        template: str = JUDGE_TEMPLATE,
        problem_key: str = "problem",
        reference_keys: Sequence[str] = ("solution", "answer"),
        concurrency: int = 8,
    ) -> None:
        self.__name__ = "rubric"
        self.judge = judge
        self.rubric = rubric
        self.max_score = max_score
        self.template = template
        self.problem_key = problem_key
        self.reference_keys = tuple(reference_keys)
        self.concurrency = concurrency

    def prompts_for(self, completions: Sequence[Any], **kwargs: Any) -> list[str]:
        count = len(completions)
        problems = _column(kwargs, self.problem_key, count)
        prompts = _column(kwargs, "prompts", count)
        references = [_column(kwargs, key, count) for key in self.reference_keys]
        out = []
        for i, completion in enumerate(completions):
            problem = problems[i] if problems[i] is not None else completion_text(prompts[i])
            reference = next((str(col[i]) for col in references if col[i] is not None), None)
            out.append(
                judge_prompt(
                    str(problem),
                    reference,
                    completion_text(completion),
                    rubric=self.rubric,
                    max_score=self.max_score,
                    template=self.template,
                )
            )
        return out

    def __call__(self, completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        return run_sync(self.score(self.prompts_for(completions, **kwargs)))

    async def score(self, prompts: Sequence[str]) -> list[float | None]:
        gate = asyncio.Semaphore(max(1, self.concurrency))

        async def one(prompt: str) -> float | None:
            async with gate:
                try:
                    reply = self.judge(prompt)
                    if inspect.isawaitable(reply):
                        reply = await reply
                except Exception:
                    return None
            grade = parse_score(str(reply), self.max_score)
            return None if grade is None else grade / self.max_score

        return list(await asyncio.gather(*(one(p) for p in prompts)))


def openai_judge(
    base_url: str,
    model: str,
    *,
    api_key: str | None = None,
    temperature: float = 0.0,
    max_tokens: int | None = None,
    timeout_s: float = 600.0,
) -> Callable[[str], Awaitable[str]]:
    """A judge that asks an OpenAI-compatible chat endpoint (``base_url`` ends in /v1)."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    async def judge(prompt: str) -> str:
        body: dict[str, Any] = {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": temperature,
        }
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        async with httpx.AsyncClient(timeout=timeout_s, headers=headers) as client:
            response = await client.post(base_url.rstrip("/") + "/chat/completions", json=body)
            response.raise_for_status()
            choices = response.json().get("choices") or [{}]
            return str((choices[0].get("message") or {}).get("content") or "")

    return judge


def reward_functions(
    names: Sequence[str],
    judge_url: str | None = None,
    judge_model: str | None = None,
    judge_api_key: str | None = None,
    rubric: Path | None = None,
) -> list[Any]:
    """The reward functions named on ``ponder train grpo --reward`` (``ValueError`` if unknown).

    >>> [type(f).__name__ for f in reward_functions(["correctness", "boxed"])]
    ['CorrectnessReward', 'function']
    """
    funcs: list[Any] = []
    for name in names:
        if name == "correctness":
            funcs.append(CorrectnessReward())
        elif name == "boxed":
            funcs.append(boxed_reward)
        elif name == "rubric":
            if not judge_url or not judge_model:
                raise ValueError("--reward rubric needs --judge-url and --judge-model")
            text = rubric.read_text(encoding="utf-8") if rubric else DEFAULT_RUBRIC
            funcs.append(
                RubricReward(
                    openai_judge(judge_url, judge_model, api_key=judge_api_key), rubric=text
                )
            )
        else:
            raise ValueError(f"unknown reward {name!r} (known: correctness, boxed, rubric)")
    return funcs
