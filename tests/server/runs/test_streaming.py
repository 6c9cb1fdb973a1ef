"""ChoiceRouter: which text is content, which is reasoning, for which choice."""

from __future__ import annotations

from scaffolds.core.trace import RunFinished, StepDelta, StepFinished, StepNote, StepStarted
from scaffolds.engines.protocol import Usage
from server.runs.streaming import ChoiceRouter, Piece


def started(step: str, label: str, *, n: int = 1, final: bool = False, choice: int | None = None):
    return StepStarted(step, "run", "generate", label, n=n, final=final, choice=choice)


def finished(step: str, *texts: str) -> StepFinished:
    return StepFinished(step, texts, (None,) * len(texts), ("stop",) * len(texts), Usage())


def run_end(text: str, choice: int = 0, step: str | None = None) -> RunFinished:
    return RunFinished(text, None, Usage(), False, choice=choice, step_id=step)


def feed(router: ChoiceRouter, *events: object) -> list[Piece]:
    out: list[Piece] = []
    for event in events:
        out += router.feed(event)  # type: ignore[arg-type]
    return out


def test_final_step_streams_as_content_and_is_not_repeated() -> None:
    r = ChoiceRouter(n=1)
    pieces = feed(
        r,
        started("a", "candidate 1"),
        StepDelta("a", 0, "cand"),
        finished("a", "cand"),
        started("b", "refine", final=True),
        StepDelta("b", 0, "the "),
        StepDelta("b", 0, "answer", reasoning="thinking"),
        finished("b", "the answer"),
        run_end("the answer", step="b"),
    )
    assert pieces == [
        Piece(0, "reasoning", "\n### candidate 1\ncand"),
        Piece(0, "content", "the "),
        Piece(0, "reasoning", "\n### refine\nthinking"),
        Piece(0, "content", "answer"),
    ]


def test_lone_answer_reasoning_has_no_header() -> None:
    r = ChoiceRouter(n=1)
    feed(r, started("a", "answer", final=True), StepDelta("a", 0, "x", reasoning="hmm"))
    assert r.reasoning(0) == "hmm"


def test_interleaved_samples_are_not_mixed() -> None:
    r = ChoiceRouter(n=1)
    pieces = feed(
        r,
        started("s", "candidate", n=2),
        StepDelta("s", 0, "a1 "),
        StepDelta("s", 1, "b1 "),
        StepDelta("s", 0, "a2"),
        StepDelta("s", 1, "b2"),
        finished("s", "a1 a2", "b1 b2"),
    )
    text = "".join(p.text for p in pieces)
    assert text == ("\n### candidate 1\na1 a2\n### candidate 2\nb1 b2")
    assert all(p.choice == 0 and p.kind == "reasoning" for p in pieces)


def test_parallel_steps_of_one_choice_are_serialised() -> None:
    r = ChoiceRouter(n=1)
    feed(
        r,
        started("x", "branch 1"),
        started("y", "branch 2"),
        StepDelta("x", 0, "x1"),
        StepDelta("y", 0, "y1"),
        StepDelta("x", 0, "x2"),
        StepDelta("y", 0, "y2"),
    )
    assert r.reasoning(0) == "\n### branch 1\nx1x2"
    feed(r, finished("x", "x1x2"))
    assert r.reasoning(0) == "\n### branch 1\nx1x2\n### branch 2\ny1y2"
    feed(r, StepDelta("y", 0, "y3"))  # y is live now
    assert r.reasoning(0).endswith("y1y2y3")


def test_choice_mapping() -> None:
    r = ChoiceRouter(n=2)
    pieces = feed(
        r,
        # A batched final step serves choices by sample index.
        started("s", "2 samples", n=2, final=True),
        StepDelta("s", 0, "zero"),
        StepDelta("s", 1, "one"),
        # A step tagged with a choice goes there whatever its index.
        started("t", "choice 2 > hint", choice=1),
        StepDelta("t", 0, "hint"),
        # An index past n falls back to choice 0.
        started("u", "extra", n=3),
        StepDelta("u", 2, "spare"),
    )
    assert Piece(0, "content", "zero") in pieces
    assert Piece(1, "content", "one") in pieces
    assert r.reasoning(1) == "\n### choice 2 > hint\nhint"
    assert "spare" in r.reasoning(0)


def test_run_end_sends_unstreamed_solution_or_the_rest() -> None:
    r = ChoiceRouter(n=3)
    pieces = feed(
        r,
        started("s", "3 samples", n=3, final=True),
        StepDelta("s", 0, "partial"),
        StepDelta("s", 1, "same"),
        run_end("partial, then forced answer 4", choice=0, step="s"),
        run_end("same", choice=1, step="s"),
        run_end("picked by vote", choice=2, step=None),
    )
    content = [(p.choice, p.text) for p in pieces if p.kind == "content"]
    assert content == [
        (0, "partial"),
        (1, "same"),
        (0, ", then forced answer 4"),
        (2, "picked by vote"),
    ]


def test_non_live_run_is_replayed_from_finished_steps() -> None:
    r = ChoiceRouter(n=1)
    pieces = feed(
        r,
        started("a", "candidate", n=2),
        finished("a", "c1", "c2"),
        started("b", "refine", final=True),
        finished("b", "answer"),
        run_end("answer", step="b"),
    )
    assert r.reasoning(0) == "\n### candidate 1\nc1\n### candidate 2\nc2"
    assert r.content(0) == "answer"
    assert [p.kind for p in pieces].count("content") == 1


def test_a_strategy_note_is_neither_content_nor_reasoning() -> None:
    router = ChoiceRouter(n=1)
    assert router.feed(StepNote("run.1", "stopping", {"probability": 0.97})) == []
    assert router.reasoning(0) == "" and router.content(0) == ""


def test_a_chunk_of_choices_is_the_same_bytes_as_the_chunk_object_encoded() -> None:
    from types import SimpleNamespace
    from typing import cast

    from scaffolds import fastjson
    from server.runs.completion import ChunkMaker, chunk_object, delta_choice
    from server.runs.planning import RunPlan
    from server.runs.streaming import sse_event

    for endpoint in ("chat", "completions"):
        plan = cast(RunPlan, SimpleNamespace(endpoint=endpoint, model="m+gsr(n=2) «ü»"))
        chunk = ChunkMaker(plan)
        cases: list[tuple[list[dict[str, object]], dict[str, object]]] = [
            ([delta_choice(endpoint, 0, content='4 «x» \n"q"')], {}),
            ([delta_choice(endpoint, 1, reasoning="hm", extra={"logprobs": {"x": 1}})], {}),
            ([], {"usage": Usage(3, 4, calls=1), "extra": {"ponder": {"trace": []}}}),
        ]
        for choices, kw in cases:
            made = chunk(choices, **kw)
            whole = chunk_object(
                endpoint,
                completion_id=chunk.id,
                created=chunk.created,
                model=plan.model,
                choices=choices,
                **kw,  # type: ignore[arg-type]
            )
            assert made == sse_event(whole)
            assert fastjson.loads(made[len(b"data: ") :]) == fastjson.loads(fastjson.dumps(whole))


def test_a_finished_runs_reasoning_is_what_the_router_gives_its_events() -> None:
    """``finished_reasoning`` (a whole body's reasoning, read from the steps) says what a
    router fed the finished run's events says: each choice's text, and each step sample's
    piece in the router's order, over random steps (final or not, of one choice or all,
    texts and reasonings empty or not, a step finished twice)."""
    import random

    from server.runs.streaming import finished_reasoning

    def merged(pieces: list[Piece]) -> list[tuple[object, int, str]]:
        out: list[tuple[object, int, str]] = []
        for p in pieces:
            if p.kind != "reasoning":
                continue
            if out and out[-1][:2] == (p.key, p.choice):
                out[-1] = (p.key, p.choice, out[-1][2] + p.text)
            else:
                out.append((p.key, p.choice, p.text))
        return out

    rng = random.Random(0)
    texts = ["", "a", "\n", "\nx", "bb", None]
    for _ in range(3000):
        n = rng.choice([1, 1, 2, 3])
        events: list[object] = []
        for i in range(rng.randint(1, 5)):
            k = rng.choice([1, 1, 2, 3, 4])
            if rng.random() < 0.9:
                final = rng.random() < 0.4
                choice = rng.choice([None, None, 0, 1, 2, 5])
                events.append(
                    started(f"s{i}", rng.choice(["c", "d"]), n=k, final=final, choice=choice)
                )
            said = tuple(rng.choice(texts) for _ in range(k))
            thought = tuple(rng.choice(texts) for _ in range(rng.choice([0, k])))
            done = StepFinished(f"s{i}", said, said, ("stop",) * k, Usage(), reasonings=thought)  # type: ignore[arg-type]
            events += [done, done] if rng.random() < 0.1 else [done]
        events += [run_end("t", choice=c) for c in range(n)]
        router = ChoiceRouter(n)
        routed = feed(router, *events)
        pieces = finished_reasoning(events, n)  # type: ignore[arg-type]
        for c in range(n):
            assert "".join(p.text for p in pieces if p.choice == c) == router.reasoning(c)
        assert merged(pieces) == merged(routed)
