"""Train the list-sum model with Reasoning Cache data, and its direct-training control.

RC data is made the way :mod:`training.data` makes it from any scaffold: the ``rc``
scaffold runs (:func:`scaffolds.solve`, ``compact`` prompt set) over an engine, its
trace becomes a :class:`~training.traces.TraceRecord`, and
:func:`training.data.build_rows` turns the trace into ``rc_reasoning`` and
``rc_summary`` rows. The engine is an *oracle*: a :class:`~scaffolds.engines.mock.MockEngine`
that reads each prompt the scaffold rendered and writes the correct chunk or summary
(:func:`oracle_reply`). Every prompt a row holds is therefore the exact text serving
renders. Each problem runs one step more than it needs, so the model also sees the state
after the end (where the chunk keeps the state).

The control learns the answer directly (``k7q3b9z1m4=`` -> ``4``, the compact ``solve``
template) from the same problem distribution. Both arms start from the same random
initialization (:func:`experiments.tiny_models.model.build_model`) and train on the same number of
tokens (prompt and completion, padding not counted), which stands for the same compute:
direct rows are shorter, so the control takes more steps. The loop is the demo's own
(AdamW, loss on the completion and end token only,
:func:`experiments.tiny_models.gsr_train.encode_rows`);
the learning rate warms up over ``warmup`` steps, then follows a cosine over the token
budget (:func:`experiments.tiny_models.gsr_train.lr_at`, with tokens as its clock).

Run::

    python -m experiments.tiny_models.rc_train rc --out runs/rc-demo/rc --tokens 4000000
    python -m experiments.tiny_models.rc_train direct --out runs/rc-demo/direct --tokens 4000000
    python -m experiments.tiny_models.rc_train rc --init runs/rc-demo/rc --seed 1 \
        --out runs/rc-demo/rc2 ...

``--init`` continues from a saved model (a fresh warm-up and cosine over the new budget;
give another ``--seed`` for fresh problems).

>>> oracle_reply("a1b2c3=")
'a11b23;c3'
>>> oracle_reply("a1b2c3=|c3>"), oracle_reply("a1b2c3=||a11b23;c3#")
('c36;=6', 'c3')
>>> for row in rc_rows([ListSumProblem.parse("a1=")]):
...     print(row["kind"], row["prompt"], row["completion"])
rc_reasoning a1= a11;=1
rc_summary a1=||a11;=1# =1
rc_reasoning a1=|=1> ;=1
>>> direct_row(ListSumProblem.parse("a1b2c3="))["completion"]
'6'
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.tiny_models.listsum_task import ListSumProblem, problems, state_of_chunk

Row = dict[str, Any]
TRAIN_LENGTHS = (4, 5, 6, 7, 8)
ARMS = ("rc", "direct")


def oracle_reply(prompt: str) -> str:
    """The correct reply to a compact ``rc`` prompt, read as the model reads it: the
    problem, then nothing (start), ``|summary>`` (continue) or ``|summary|attempt#``
    (summarize)."""
    item = ListSumProblem.parse(prompt)
    rest = prompt.removeprefix(item.problem)
    if not rest:
        return item.chunk(item.start_state)
    if rest.startswith("|") and rest.endswith("#") and rest.count("|") == 2:
        return state_of_chunk(rest[1:-1].split("|")[1])
    if rest.startswith("|") and rest.endswith(">") and rest.count("|") == 1:
        return item.chunk(rest[1:-1])
    raise ValueError(f"not a compact rc prompt: {prompt!r}")


def oracle_engine() -> Any:
    """A MockEngine answering every rc step correctly."""
    from scaffolds.engines.mock import MockEngine

    return MockEngine(lambda request: oracle_reply(request.prompt_text()))


async def oracle_records(items: Sequence[ListSumProblem], extra_steps: int = 1) -> list[Any]:
    """One trace per problem: ``rc(steps=needed + extra_steps)`` over the oracle."""
    from scaffolds import RunSettings, SamplingParams, solve
    from training.traces import TraceRecord

    engine = oracle_engine()
    records = []
    for item in items:
        spec = f"rc(steps={item.chunks_needed + extra_steps})"
        result = await solve(
            spec,
            item.problem,
            engine,
            RunSettings(params=SamplingParams(max_tokens=16), prompts="compact"),
        )
        if result.solutions[0].answer != item.answer:
            raise AssertionError(f"the oracle got {item.problem} wrong")
        events = tuple(result.events)
        records.append(
            TraceRecord(item.id, item.problem, item.answer, events, False, "compact", spec)
        )
    return records


def rc_rows(items: Sequence[ListSumProblem], extra_steps: int = 1) -> list[Row]:
    """``rc_reasoning`` and ``rc_summary`` rows of the oracle's traces (all kept: every
    chunk is right, though only the last one carries the final answer)."""
    return rows_of_records(asyncio.run(oracle_records(items, extra_steps)))


def rows_of_records(records: Sequence[Any]) -> list[Row]:
    """:func:`training.data.build_rows` over oracle traces, keeping every rc row."""
    from training.data import build_rows

    rows: list[Row] = []
    for record in records:
        rows += build_rows(
            record,
            grade=lambda gold, text: True,
            kinds=("rc_reasoning", "rc_summary"),
            rc_summaries="all",
        )
    return rows


def direct_row(item: ListSumProblem) -> Row:
    """The problem as the compact ``solve`` template asks it -> its answer."""
    from scaffolds.strategies.single import DIRECT
    from scaffolds.strategies.steps import render_step

    prompt = render_step(DIRECT, item.problem, {"prompt": "solve"}, prompts="compact").prompt
    return {"prompt": prompt, "completion": item.answer, "kind": "direct", "id": item.id}


def row_tokens(row: Row) -> int:
    """Tokens a row trains on: its prompt, completion and end token (one per character)."""
    return len(row["prompt"]) + len(row["completion"]) + 1


def training_rows(arm: str, count: int, seed: int = 0) -> list[Row]:
    """The rows of ``count`` training problems (lengths 4-8) for ``arm``."""
    items = problems("train", count, lengths=TRAIN_LENGTHS, seed=seed)
    if arm == "rc":
        return rc_rows(items)
    if arm == "direct":
        return [direct_row(item) for item in items]
    raise ValueError(f"arm must be one of {ARMS} (got {arm!r})")


def train(
    model: Any,
    rows: Sequence[Row],
    *,
    tokens: int,
    lr: float = 3e-3,
    batch: int = 128,
    warmup: int = 50,
    seed: int = 0,
    log_every: int = 50,
    log: Any = print,
) -> dict[str, Any]:
    """Train ``model`` in place on shuffled passes over ``rows`` until ``tokens`` tokens."""
    import torch

    from experiments.tiny_models.gsr_train import encode_rows, lr_at
    from experiments.tiny_models.train import train_step

    rng = random.Random(seed)
    order: list[int] = []
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    model.train()
    step, seen, started, losses = 0, 0, time.monotonic(), []
    while seen < tokens:
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, float(seen), peak=lr, warmup=warmup, seconds=float(tokens))
        chosen = []
        for _ in range(batch):
            if not order:
                order = list(range(len(rows)))
                rng.shuffle(order)
            chosen.append(rows[order.pop()])
        ids, targets = encode_rows(chosen)
        losses.append(train_step(model, optimizer, ids, targets))
        step += 1
        seen += sum(row_tokens(r) for r in chosen)
        if log_every and step % log_every == 0:
            log(
                f"step {step:5d}  tokens {seen:>9,}  {time.monotonic() - started:7.1f}s  "
                f"loss {sum(losses[-log_every:]) / log_every:.4f}"
            )
    model.eval()
    return {
        "steps": step,
        "tokens": seen,
        "epochs": step * batch / max(1, len(rows)),
        "train_seconds": round(time.monotonic() - started, 1),
        "final_loss": sum(losses[-20:]) / max(1, len(losses[-20:])),
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("arm", choices=ARMS)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tokens", type=int, default=4_000_000, help="training tokens")
    parser.add_argument("--problems", type=int, default=20_000, help="training problems")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--init", type=Path, help="continue from this saved model")
    args = parser.parse_args(argv)

    import torch

    from experiments.tiny_models.model import build_model, count_parameters, save_model
    from experiments.tiny_models.tokenizer import build_tokenizer

    torch.set_num_threads(1)
    started = time.monotonic()
    rows = training_rows(args.arm, args.problems, seed=args.seed)
    data_seconds = round(time.monotonic() - started, 1)
    print(f"{args.arm}: {len(rows):,} rows from {args.problems:,} problems in {data_seconds}s")
    if args.init is not None:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(str(args.init), dtype=torch.float32)
    else:
        model = build_model(args.seed)
    info = train(model, rows, tokens=args.tokens, lr=args.lr, batch=args.batch, seed=args.seed)
    info |= {
        "arm": args.arm,
        "rows": len(rows),
        "problems": args.problems,
        "train_lengths": list(TRAIN_LENGTHS),
        "data_seconds": data_seconds,
        "parameters": count_parameters(model),
        "seed": args.seed,
        "lr": args.lr,
        "batch": args.batch,
        "token_budget": args.tokens,
        "init": None if args.init is None else str(args.init),
        "command": "python -m experiments.tiny_models.rc_train " + shlex.join(argv or sys.argv[1:]),
        "example_rows": rows[:4],
    }
    save_model(model, build_tokenizer(), args.out)
    (args.out / "rc_train.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps({k: v for k, v in info.items() if k != "example_rows"}))


if __name__ == "__main__":
    main()
