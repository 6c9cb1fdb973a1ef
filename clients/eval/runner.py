"""Run scaffolds over problems against a Ponder server (or any OpenAI-compatible URL).

Every (scaffold, problem, sample) is one chat request with ``n=1`` through the official
``openai`` async client (which retries connection errors, 429 and 5xx with backoff).
The requests run through the evaluation loop shared with training and the experiments
(:func:`scaffolds.evaluation.loop.run_jobs`): ``concurrency`` workers share one queue;
each finished sample is graded and appended to the results file at once, so cancelling
(Ctrl-C) loses nothing already finished and a rerun does only what is missing (failed
samples included).

Ponder's extensions are read when present and ignored when not: ``usage.engine_calls``,
``usage.prompt_tokens_details.cached_tokens``, ``ponder.cut_reason`` and ``trace``.
The scaffold spec ``none`` sends no Ponder field at all (for plain OpenAI endpoints).

A run reads answers one way, its ``answer_format``: sent as the request's field, so the
server's votes read them so, and used for each record's ``extracted`` answer, which the
grader grades and maj@k clusters; the answer follows the end of the model's thinking
(``thinking``: the served model's markers, ``</think>`` unless its card says). Every
record says its format and markers; a results file is resumed only as it was graded
(:func:`clients.eval.resume.check_resume`).

>>> def step(i, kind, answer, tokens):
...     return [{"type": "step_started", "step_id": i, "kind": kind},
...             {"type": "step_finished", "step_id": i, "answers": [answer],
...              "texts": ["..."], "usage": {"completion_tokens": tokens}}]
>>> trace = step("r1", "reasoning", "3", 10) + step("s1", "summary", None, 4)
>>> trace += step("r2", "reasoning", "4", 6)
>>> [(s["answer"], s["completion_tokens"]) for s in reasoning_steps(trace)]
[('3', 10), ('4', 20)]
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from clients.eval.resume import check_resume
from clients.eval.served import DEFAULT_CONCURRENCY, card_concurrency, served_card
from scaffolds import terminal
from scaffolds.dependencies import require
from scaffolds.errors import PonderError, SpecError
from scaffolds.evaluation.answers import (
    ANSWER_FORMATS,
    AnswerFormat,
    ThinkingMarkers,
)
from scaffolds.evaluation.grading import Grader
from scaffolds.evaluation.loop import Board, Job, RunOutcome, Tally, make_jobs, run_jobs
from scaffolds.evaluation.problems import ProblemRow
from scaffolds.evaluation.results import Record, ResultStore
from scaffolds.spec.registry import default_registry
from scaffolds.spec_grammar import format_spec, parse_spec

__all__ = [
    "NO_SCAFFOLD",
    "EvalConfig",
    "reasoning_steps",
    "run_eval",
    "scored_steps",
    "spec_name",
]

NO_SCAFFOLD = "none"
"""The spec that sends a plain OpenAI request (no ``scaffold``/``return_trace``)."""


@dataclass
class EvalConfig:
    """One eval run; ``out_dir`` receives ``results.jsonl`` and the report."""

    base_url: str
    model: str
    scaffolds: list[str]
    out_dir: Path
    samples: int = 1
    concurrency: int | None = None
    """Requests in flight; None: what the server runs at once (its card's
    ``max_concurrent_runs``, else :data:`~clients.eval.served.DEFAULT_CONCURRENCY`)."""
    api_key: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    """Sample i is sent with ``seed + i`` (so samples differ, and reruns repeat)."""
    template: str = "{problem}"
    trace: bool = False
    """Store each sample's whole trace (``return_trace``) in its record."""
    timeout_s: float = 1800.0
    max_retries: int = 3
    extra_body: dict[str, Any] = field(default_factory=dict)
    answer_format: AnswerFormat = "boxed"
    """How answers are read, by the server's votes (the request's ``answer_format``) and
    the grade: ``boxed`` (only the last ``\\boxed{}`` after the thinking, as the papers'
    code grades) or ``lenient`` (also "final answer is X", ``#### X``, the last number)."""
    thinking: ThinkingMarkers = field(default_factory=ThinkingMarkers)
    """Where the model's thinking starts and ends in a text: the answer is read after it
    (the served model's own markers, from its card, matter when its thinking comes back
    inside ``content``)."""

    def __post_init__(self) -> None:
        if self.answer_format not in ANSWER_FORMATS:
            raise ValueError(
                f"answer_format must be one of {', '.join(ANSWER_FORMATS)} "
                f"(got {self.answer_format!r})"
            )
        sent = self.extra_body.get("answer_format", self.answer_format)
        if sent != self.answer_format:
            raise ValueError(
                f"the extra body's answer_format {sent!r} differs from the run's "
                f"{self.answer_format!r}: set it with --answer-format instead"
            )

    @property
    def results_path(self) -> Path:
        return self.out_dir / "results.jsonl"


def spec_name(spec: str) -> str:
    """The top strategy name of a spec (``none`` for the plain-request spec).

    >>> spec_name("rc(steps=3)"), spec_name('{"name": "gsr", "n": 4}'), spec_name("none")
    ('rc', 'gsr', 'none')
    """
    if spec.strip() == NO_SCAFFOLD:
        return NO_SCAFFOLD
    return str(parse_spec(spec).get("name", ""))


def check_specs(specs: Sequence[str]) -> list[str]:
    """The specs in one canonical spelling (the resume key), de-duplicated; SpecError
    names a malformed one.

    >>> check_specs(["gsr( n = 4 )", '{"name": "gsr", "n": 4}', "none"])
    ['gsr(n=4)', 'none']
    """
    out: list[str] = []
    for spec in specs:
        spec = spec.strip()
        try:
            canonical = spec if spec == NO_SCAFFOLD else format_spec(parse_spec(spec))
        except SpecError as err:
            raise SpecError(f"--scaffold {spec!r}: {err}", param="scaffold") from None
        if canonical not in out:
            out.append(canonical)
    return out


def scored_steps(spec: str) -> tuple[str, ...]:
    """The trace kinds of the steps that ``spec``'s top strategy scores one by one (its
    ``scored_steps`` trait; none for a name this program does not know).

    >>> scored_steps("rc(steps=3)"), scored_steps("gsr(n=4)"), scored_steps("none")
    (('reasoning',), (), ())
    """
    if spec.strip() == NO_SCAFFOLD:
        return ()
    try:
        return default_registry().get(spec_name(spec)).scored_steps
    except PonderError:
        return ()


def reasoning_steps(
    trace: Sequence[Mapping[str, Any]],
    step_kinds: Sequence[str] = ("reasoning",),
    answer_format: AnswerFormat = "lenient",
    thinking: ThinkingMarkers | None = None,
) -> list[dict[str, Any]]:
    """Per scored step (RC's reasoning chunks, ``step_kinds``): its answer (the trace's,
    else its text read in ``answer_format``, after ``thinking``), text and the cumulative
    completion tokens of every step finished so far. Only choice 0 (or untagged steps)
    count."""
    marks = thinking or ThinkingMarkers()
    kinds: dict[str, str] = {}
    steps: list[dict[str, Any]] = []
    spent = 0
    for event in trace:
        kind, step_id = event.get("type"), str(event.get("step_id"))
        if kind == "step_started" and event.get("choice") in (None, 0):
            kinds[step_id] = str(event.get("kind"))
        elif kind == "step_finished" and step_id in kinds:
            usage = event.get("usage") or {}
            spent += int(usage.get("completion_tokens") or 0)
            if kinds[step_id] in step_kinds:
                texts, answers = event.get("texts") or [""], event.get("answers") or []
                text = str(texts[0] or "")
                answer = answers[0] if answers else marks.answer(text, answer_format)
                steps.append({"answer": answer, "text": text, "completion_tokens": spent})
    return steps


def _usage(data: Mapping[str, Any]) -> dict[str, int]:
    usage = data.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": int(usage.get("total_tokens") or prompt + completion),
        "cached_tokens": int(details.get("cached_tokens") or 0),
        "engine_calls": int(usage.get("engine_calls") or 1),
    }


def _message(data: Mapping[str, Any]) -> tuple[str, str | None, str | None]:
    """(content, reasoning, finish_reason) of the first choice."""
    choices = data.get("choices") or [{}]
    first = choices[0] or {}
    message = first.get("message") or {}
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    return str(message.get("content") or ""), reasoning, first.get("finish_reason")


def _error_text(err: BaseException) -> str:
    """A failed request's error in one line, with its cause where the SDK's own message
    is generic (``APIConnectionError: Connection error.`` says neither host nor why).

    >>> try:
    ...     try:
    ...         raise OSError("[Errno 111] Connection refused")
    ...     except OSError as cause:
    ...         raise RuntimeError("Connection error.") from cause
    ... except RuntimeError as err:
    ...     print(_error_text(err))
    RuntimeError: Connection error. (OSError: [Errno 111] Connection refused)
    """
    text = f"{type(err).__name__}: {err}"
    cause = err.__cause__
    if cause is not None and str(cause) and str(cause) not in text:
        text += f" ({type(cause).__name__}: {cause})"
    return " ".join(text.split())[:2000]


class _Client:
    """Answers one job with one chat request; the loop grades and stores the record."""

    def __init__(self, config: EvalConfig) -> None:
        require("eval", "ponder eval", modules=("openai",))
        import httpx2  # the openai SDK's HTTP client
        from openai import AsyncOpenAI, DefaultAsyncHttpxClient

        self.config = config
        self.scored = {spec: scored_steps(spec) for spec in config.scaffolds}
        # The connection pool never caps the concurrency (the SDK's default stops at 1,000).
        unbounded = httpx2.Limits(max_connections=None, max_keepalive_connections=None)
        self.client = AsyncOpenAI(
            base_url=config.base_url,
            api_key=config.api_key or "EMPTY",
            max_retries=config.max_retries,
            timeout=config.timeout_s,
            http_client=DefaultAsyncHttpxClient(limits=unbounded, timeout=config.timeout_s),
        )

    def body(self, spec: str, problem: ProblemRow, sample: int) -> dict[str, Any]:
        """Everything but ``model`` and ``messages``, sent as ``extra_body``."""
        cfg = self.config
        body: dict[str, Any] = dict(problem.body or {})
        body.pop("messages", None)
        for name, value in (("temperature", cfg.temperature), ("max_tokens", cfg.max_tokens)):
            if value is not None:
                body[name] = value
        if cfg.seed is not None:
            body["seed"] = cfg.seed + sample
        body.update(cfg.extra_body)
        if spec != NO_SCAFFOLD:
            body["scaffold"] = spec
            body["answer_format"] = cfg.answer_format
            if problem.answer is not None:  # never shown to the model (RSA's accuracy)
                body["reference"] = str(problem.answer)
            if cfg.trace or self.scored[spec]:
                body["return_trace"] = True
        return body

    async def request(self, job: Job[ProblemRow]) -> Record:
        cfg = self.config
        spec, problem, sample = job.arm, job.problem, job.sample
        record: Record = {"scaffold": spec, "id": problem.id, "sample": sample}
        record |= {"model": cfg.model, "reference": problem.answer}
        record["answer_format"] = cfg.answer_format
        record["thinking_markers"] = cfg.thinking.as_dict()
        started = time.perf_counter()
        try:
            reply: Any = await self.client.chat.completions.create(
                model=cfg.model,
                messages=problem.messages(cfg.template),  # type: ignore[arg-type]
                extra_body=self.body(spec, problem, sample),
            )
            data: dict[str, Any] = reply.model_dump(mode="json")
        except Exception as err:  # recorded, counted, and retried by the next run
            record["error"] = _error_text(err)
            record["latency_s"] = time.perf_counter() - started
            record["time"] = time.time()
            return record
        record["latency_s"] = time.perf_counter() - started
        text, reasoning, finish = _message(data)
        ponder = data.get("ponder") if isinstance(data.get("ponder"), dict) else {}
        cut_reason = (ponder or {}).get("cut_reason")
        record |= {"response": text, "reasoning": reasoning, "finish_reason": finish}
        record |= {"cut_short": finish == "length" or bool(cut_reason), "cut_reason": cut_reason}
        record["usage"] = _usage(data)
        record["extracted"] = cfg.thinking.answer(text, cfg.answer_format) if text else None
        trace = data.get("trace")
        if isinstance(trace, list):
            if self.scored[spec]:
                kinds = self.scored[spec]
                steps = reasoning_steps(trace, kinds, cfg.answer_format, cfg.thinking)
                record["steps"] = steps  # graded later
            if cfg.trace:
                record["trace"] = trace
        if problem.meta:
            record["meta"] = problem.meta
        record["time"] = time.time()
        return record

    async def aclose(self) -> None:
        await self.client.close()


async def run_eval(
    config: EvalConfig,
    problems: Sequence[ProblemRow],
    grader: Grader,
    *,
    progress: bool = True,
    console: Console | None = None,
    on_record: Callable[[Record], None] | None = None,
) -> RunOutcome:
    """Do every pending sample, appending each record as it lands; returns the counts.

    Cancel it (Ctrl-C) at any time: finished samples are already on disk. The grader must
    read answers in the run's ``answer_format`` after its ``thinking`` (or none, as a
    judge), and a results file graded another way is not resumed
    (:class:`~clients.eval.resume.ResumeConflictError`).
    """
    if grader.answer_format not in (None, config.answer_format):
        raise ValueError(
            f"the {grader.name} grader reads answers {grader.answer_format!r}, the run "
            f"{config.answer_format!r}: build it with answer_format={config.answer_format!r}"
        )
    if getattr(grader, "thinking", config.thinking) != config.thinking:
        raise ValueError(
            f"the {grader.name} grader reads answers after other thinking markers than "
            f"the run: build it with thinking={config.thinking!r}"
        )
    config.out_dir.mkdir(parents=True, exist_ok=True)
    store = ResultStore(config.results_path)
    loaded = store.compact()
    check_resume(config.results_path, config.answer_format, loaded.records, config.thinking)
    work = make_jobs(config.scaffolds, problems, range(config.samples), loaded.done())
    ids = {p.id for p in problems}
    tallies = {spec: Tally() for spec in config.scaffolds}
    for record in loaded.records:
        wanted = record["scaffold"] in tallies and record["id"] in ids
        if wanted and not record.get("error") and int(record["sample"]) < config.samples:
            tallies[record["scaffold"]].add(record)
    already_done = sum(t.done for t in tallies.values())
    console = console or terminal.console(stderr=True)
    board = Board(
        tallies,
        len(problems) * config.samples,
        console=console,
        enabled=progress,
    )
    client = _Client(config)
    try:
        concurrency = (
            config.concurrency
            or card_concurrency(await served_card(config.base_url, config.model, config.api_key))
            or DEFAULT_CONCURRENCY
        )
        if progress and config.concurrency is None:
            console.print(f"concurrency {concurrency} (what {config.base_url} runs at once)")
        outcome = await run_jobs(
            work,
            client.request,
            grader=grader,
            concurrency=concurrency,
            store=store,
            board=board,
            on_job=None if on_record is None else lambda _job, record: on_record(record),
        )
    finally:
        await client.aclose()
    outcome.already_done = already_done
    store.compact()  # a retried failure left two records for its key
    return outcome


def load_extra_body(text: str | None) -> dict[str, Any]:
    """``--extra-body`` JSON (an object) to a dict.

    >>> load_extra_body('{"budget": {"max_tokens": 4096}}')
    {'budget': {'max_tokens': 4096}}
    """
    if not text:
        return {}
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError("--extra-body must be a JSON object")
    return value
