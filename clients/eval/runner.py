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
from scaffolds.spec.build import build_strategy
from scaffolds.spec.registry import default_registry
from scaffolds.spec_grammar import format_spec, parse_spec
from scaffolds.strategies import RSA

__all__ = [
    "NO_SCAFFOLD",
    "EvalConfig",
    "has_rounds",
    "population_rounds",
    "reasoning_steps",
    "run_eval",
    "scored_steps",
    "spec_name",
    "time_cut",
]

CONNECT_TIMEOUT_S = 30.0
"""Seconds to open a connection to the server (the one time limit a request has by
default)."""

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
    timeout_s: float | None = None
    """Seconds a request may take (None: no limit; a long run is normal on a GPU engine,
    and the server's own time limit, if any, answers with what the run had). A request
    this cuts is recorded as time cut (``cut_reason`` "time"), not as an error."""
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


def has_rounds(spec: str) -> bool:
    """Whether ``spec``'s top strategy is RSA, whose trace notes each round's population
    (``ponder eval`` asks for its trace and reports each round, :func:`population_rounds`).

    >>> has_rounds("rsa(n=4, k=2, rounds=2)"), has_rounds("gsr(n=4)"), has_rounds("none")
    (True, False, False)
    """
    if spec.strip() == NO_SCAFFOLD:
        return False
    try:
        return isinstance(build_strategy(spec), RSA)
    except PonderError:
        return False


def population_rounds(trace: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each round's population in a trace (its ``population`` notes of choice 0: round 0
    is the first population): its members' answers and, when the request carried the
    reference, which are right (judged by the server's vote). A round whose note has no
    ``correct`` (no reference) is left out.

    >>> note = {"type": "step_note", "kind": "population"}
    >>> trace = [note | {"values": {"round": 0, "answers": ["4", None], "correct": [True, False]}},
    ...          note | {"values": {"round": 1, "answers": ["4", "4"], "correct": [True, True]}}]
    >>> [r["correct"] for r in population_rounds(trace)]
    [[True, False], [True, True]]
    """
    rounds = []
    for event in trace:
        if event.get("type") != "step_note" or event.get("kind") != "population":
            continue
        values = event.get("values") or {}
        if event.get("choice") not in (None, 0) or not isinstance(values.get("correct"), list):
            continue
        answers = [None if a is None else str(a) for a in values.get("answers") or []]
        correct = [bool(c) for c in values["correct"]]
        rounds.append(
            {"round": int(values.get("round") or 0), "answers": answers, "correct": correct}
        )
    return rounds


def time_cut(err: BaseException) -> bool:
    """Whether a failed request was cut by a time limit: this client's ``timeout_s``, or
    the server's (a 504 ``deadline_exceeded``: the limit passed before any answer)."""
    from openai import APIStatusError, APITimeoutError

    if isinstance(err, APITimeoutError):
        return True
    if isinstance(err, APIStatusError) and err.status_code == 504:
        body = err.body if isinstance(err.body, dict) else {}
        return body.get("code") == "deadline_exceeded"
    return False


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
        self.rounds = {spec: has_rounds(spec) for spec in config.scaffolds}
        # The connection pool never caps the concurrency (the SDK's default stops at 1,000).
        unbounded = httpx2.Limits(max_connections=None, max_keepalive_connections=None)
        # No read limit unless asked: a non-streamed run sends nothing until it ends.
        timeout = httpx2.Timeout(config.timeout_s, connect=CONNECT_TIMEOUT_S)
        self.client = AsyncOpenAI(
            base_url=config.base_url,
            api_key=config.api_key or "EMPTY",
            max_retries=config.max_retries,
            timeout=timeout,
            http_client=DefaultAsyncHttpxClient(limits=unbounded, timeout=timeout),
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
            if cfg.trace or self.scored[spec] or self.rounds[spec]:
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
            record["latency_s"] = time.perf_counter() - started
            record["time"] = time.time()
            if time_cut(err):  # a finished sample with no answer: counted apart, kept
                record |= {"response": "", "reasoning": None, "finish_reason": "length"}
                record |= {"cut_short": True, "cut_reason": "time", "extracted": None}
                record["time_cut"] = _error_text(err)
                return record
            record["error"] = _error_text(err)
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
            if self.rounds[spec]:
                record["rounds"] = population_rounds(trace)
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
