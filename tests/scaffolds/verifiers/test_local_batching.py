"""Concurrent calls of the in-process verifier share forward passes: the batcher's rules on
a plain function (blocked on an event where a test needs a batch in flight), then the
verifier on a tiny random Llama over SmolLM2's tokenizer (forwards counted by wrapping
the model)."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from scaffolds.errors import EngineUnavailableError
from scaffolds.verifiers import LocalVerifier
from scaffolds.verifiers.batching import RowBatcher

WAIT_S = 60.0  # only ever reached when a test is broken: the event is always set


class Blocking:
    """Upper-cases rows; the first batch waits for ``release``; records every batch.
    Made inside the test's event loop (``started`` is set from the worker thread)."""

    def __init__(self, fail: BaseException | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        self.began = asyncio.Event()
        self.release = threading.Event()
        self.batches: list[list[str]] = []
        self.fail = fail

    def __call__(self, rows: list[str]) -> list[str]:
        self.batches.append(list(rows))
        self.loop.call_soon_threadsafe(self.began.set)
        if len(self.batches) == 1:
            self.release.wait(WAIT_S)
            if self.fail is not None:
                raise self.fail
        return [r.upper() for r in rows]

    async def started(self) -> None:
        await asyncio.wait_for(self.began.wait(), WAIT_S)


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(1)
    yield pool
    pool.shutdown(wait=True)


async def test_calls_that_arrive_during_a_batch_go_together_in_the_next(
    executor: ThreadPoolExecutor,
) -> None:
    work = Blocking()
    batcher = RowBatcher(work, executor, max_rows=3)
    first = asyncio.ensure_future(batcher.run(["a"]))  # alone: it starts at once
    await work.started()
    calls = [["b", "c"], ["d"], ["e"], ["f", "g", "h", "i"]]
    later = [asyncio.ensure_future(batcher.run(rows)) for rows in calls]
    await asyncio.sleep(0)
    work.release.set()
    results = await asyncio.gather(first, *later)
    assert results == [["A"], ["B", "C"], ["D"], ["E"], ["F", "G", "H", "I"]]
    # whole calls, first come first taken, up to 3 rows; a bigger call goes alone
    assert work.batches == [["a"], ["b", "c", "d"], ["e"], ["f", "g", "h", "i"]]
    assert batcher.batches == 4


async def test_a_cancelled_caller_neither_breaks_nor_stalls_the_others(
    executor: ThreadPoolExecutor,
) -> None:
    work = Blocking()
    batcher = RowBatcher(work, executor, max_rows=8)
    running = [asyncio.ensure_future(batcher.run([row])) for row in "ab"]
    await work.started()
    queued = [asyncio.ensure_future(batcher.run([row])) for row in "cd"]
    await asyncio.sleep(0)
    running[0].cancel()  # its rows are in the forward already
    queued[0].cancel()  # its rows were not taken yet: they are never scored
    work.release.set()
    assert await running[1] == ["B"] and await queued[1] == ["D"]
    assert running[0].cancelled() and queued[0].cancelled()
    assert work.batches == [["a", "b"], ["d"]]


async def test_a_failed_batch_fails_each_of_its_callers_with_the_same_error(
    executor: ThreadPoolExecutor,
) -> None:
    work = Blocking(fail=RuntimeError("out of memory"))
    batcher = RowBatcher(work, executor, max_rows=8)
    calls = [asyncio.ensure_future(batcher.run([row])) for row in "ab"]
    await work.started()
    work.release.set()
    errors = await asyncio.gather(*calls, return_exceptions=True)
    assert errors[0] is work.fail and errors[1] is work.fail
    assert await batcher.run(["c"]) == ["C"]  # the next batch runs as usual


async def test_closing_fails_the_callers_still_waiting(executor: ThreadPoolExecutor) -> None:
    work = Blocking()
    batcher = RowBatcher(work, executor, max_rows=8)
    calls = [asyncio.ensure_future(batcher.run([row])) for row in "a"]
    await work.started()
    calls.append(asyncio.ensure_future(batcher.run(["b"])))
    await asyncio.sleep(0)
    await batcher.aclose()
    work.release.set()
    for outcome in await asyncio.gather(*calls, return_exceptions=True):
        assert isinstance(outcome, EngineUnavailableError)
    with pytest.raises(EngineUnavailableError, match="closed"):
        await batcher.run(["c"])
    assert work.batches == [["a"]]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    from tests.training.test_train_verifier import tiny_smollm2_vocab_model

    return tiny_smollm2_vocab_model(tmp_path_factory.mktemp("tiny-verifier"))


def count_forwards(verifier: LocalVerifier) -> list[dict[str, Any]]:
    """Wrap the verifier's model so that each forward's inputs are recorded."""
    model = verifier._load().model
    calls: list[dict[str, Any]] = []
    forward = model.forward

    def counted(**inputs: Any) -> Any:
        calls.append(inputs)
        return forward(**inputs)

    model.forward = counted
    return calls


CALLS = [
    ("What is 2 + 3?", ["5", "2 + 3 = 5, so the answer is \\boxed{5}."]),
    ("What is 10 - 4?", ["6", "It is 7", "10 - 4 leaves six: \\boxed{6}"]),
    ("Name a prime.", ["2"]),
    ("What is 3 * 3?", ["3 * 3 = 9.\n\nSo \\boxed{9}.", "8"]),
]


async def test_concurrent_calls_share_forwards_and_each_gets_its_own_answer(
    tiny_dir: Path,
) -> None:
    verifier = LocalVerifier(tiny_dir, max_batch=5)
    try:
        forwards = count_forwards(verifier)
        alone = [await verifier.verify(problem, c) for problem, c in CALLS]
        assert len(forwards) == len(CALLS)
        forwards.clear()
        together = await asyncio.gather(*(verifier.verify(p, c) for p, c in CALLS))
    finally:
        await verifier.aclose()
    # 8 rows, 5 at most per forward: the first two calls, then the last two
    assert [len(f["input_ids"]) for f in forwards] == [5, 3]
    for mine, single in zip(together, alone, strict=True):
        assert mine.scores == pytest.approx(single.scores, abs=1e-6)
        assert mine.usage == single.usage and mine.usage.calls == 1
    # the scores differ between candidates by far more than the tolerance
    assert max(alone[1].scores) - min(alone[1].scores) > 1e-4
    # rows sorted by length; each row's positions start at 0 at its first real token
    mask, positions = forwards[0]["attention_mask"], forwards[0]["position_ids"]
    assert mask[:, -1].tolist() == [1] * 5 and mask[0].sum() <= mask[-1].sum()
    for row_mask, row_positions in zip(mask.tolist(), positions.tolist(), strict=True):
        real = row_positions[len(row_mask) - sum(row_mask) :]
        assert real == list(range(sum(row_mask)))
    assert forwards[0]["logits_to_keep"] == 1


async def test_a_process_verifiers_step_scores_through_a_shared_forward(
    tiny_dir: Path, tmp_path: Path
) -> None:
    process_dir = shutil.copytree(tiny_dir, tmp_path / "process")
    (process_dir / "ponder_training.json").write_text(json.dumps({"kinds": ["verify_step"]}))
    verifier = LocalVerifier(process_dir)
    calls = [("2+2?", ["two\n\nplus two\n\n4", "5"]), ("1+1?", ["one\n\n2"])]
    try:
        forwards = count_forwards(verifier)
        alone = [await verifier.verify(p, c, step="\n\n") for p, c in calls]
        forwards.clear()
        together = await asyncio.gather(*(verifier.verify(p, c, step="\n\n") for p, c in calls))
    finally:
        await verifier.aclose()
    assert [len(f["input_ids"]) for f in forwards] == [3 + 1 + 2]
    for mine, single in zip(together, alone, strict=True):
        assert mine.steps is not None and single.steps is not None
        assert [len(s) for s in mine.steps] == [len(s) for s in single.steps]
        for got, want in zip(mine.steps, single.steps, strict=True):
            assert got == pytest.approx(want, abs=1e-6)
        assert mine.scores == pytest.approx([s[-1] for s in single.steps], abs=1e-6)
        assert mine.usage == single.usage and mine.usage.calls == 1
    assert [len(s) for s in together[0].steps or ()] == [3, 1]


async def test_a_failed_forward_reaches_every_caller_of_its_batch(tiny_dir: Path) -> None:
    verifier = LocalVerifier(tiny_dir)
    model = verifier._load().model
    failure = RuntimeError("forward failed")

    def broken(**inputs: Any) -> Any:
        raise failure

    model.forward = broken
    try:
        outcomes = await asyncio.gather(
            *(verifier.verify(p, c) for p, c in CALLS), return_exceptions=True
        )
    finally:
        await verifier.aclose()
    assert all(outcome is failure for outcome in outcomes)


async def test_a_served_models_verifier_max_batch_caps_its_forwards(tiny_dir: Path) -> None:
    from server.pool.served_models import model_verifier
    from server.settings import Settings

    settings = Settings(
        model="m",
        engines=("http://127.0.0.1:9/v1",),
        verifier=f"local:{tiny_dir}",
        verifier_max_batch=3,
    )
    [config] = settings.served_models()
    verifier = model_verifier(config, {}, "models.m.verifier")
    assert isinstance(verifier, LocalVerifier)
    try:
        forwards = count_forwards(verifier)
        await asyncio.gather(*(verifier.verify(p, c) for p, c in CALLS))
    finally:
        await verifier.aclose()
    # calls of 2, 3, 1 and 2 rows, 3 at most per forward: 2 + 3 > 3, so the first goes
    # alone, then the second, then the last two together (at the default, one of 8)
    assert [len(f["input_ids"]) for f in forwards] == [2, 3, 3]


def test_the_documented_default_max_batch_is_the_verifiers() -> None:
    from scaffolds.verifiers.local import MAX_BATCH
    from server.model_settings import ModelOptions

    help_text = ModelOptions.model_fields["verifier_max_batch"].description or ""
    assert f"default: {MAX_BATCH}," in help_text
