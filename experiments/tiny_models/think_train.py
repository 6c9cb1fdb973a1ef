"""Train the thinking variant of the addition model: it writes its carries inside
``<think>...</think>`` before the sum, like a reasoning model served with a parser.

``347+589=`` -> ``<think>16 13 9</think>936<eos>``: the thinking is the column sums from
the right, each with the carry in (7+9=16, 4+8+1=13, 3+5+1=9), then the sum. Some rows
(``--cut-share``) close the thinking early, at any character, and still end with the
right sum, so that a thinking block closed by a forced answer is followed by an answer;
a cut at the very start is the empty block that ``enable_thinking: false`` puts in the
prompt. Loss is on everything after the prompt. Same loop as
:mod:`experiments.tiny_models.train` (AdamW, cosine, batch 128, one thread), with its checkpoint
pick at the target accuracy of full thinking.

Run (a few minutes on one CPU thread)::

    python -m experiments.tiny_models.think_train --out scaffolds/models/ponder-addition-think

>>> thinking_of(AdditionProblem(347, 589))
'16 13 9'
>>> completion(AdditionProblem(347, 589), cut=3)
'<think>16 </think>936'
"""

from __future__ import annotations

import argparse
import random
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.tiny_models.tokenizer import EOS, PAD, THINK_END, THINK_START, vocabulary
from experiments.tiny_models.train import Checkpoint, learning_rate, pick, train_step
from scaffolds.evaluation.addition_task import AdditionProblem, iter_problems, problems

MAX_NEW = 24
"""Greedy decoding budget: thinking (at most 11 characters), markers, sum and end."""


def thinking_of(item: AdditionProblem) -> str:
    """The column sums from the right, each with its carry in, separated by spaces."""
    a, b, carry, sums = item.a, item.b, 0, []
    while a or b:
        total = a % 10 + b % 10 + carry
        sums.append(str(total))
        carry, a, b = total // 10, a // 10, b // 10
    return " ".join(sums)


def completion(item: AdditionProblem, cut: int | None = None) -> str:
    """What the model writes: the thinking (its first ``cut`` characters, if cut), then
    the sum."""
    thinking = thinking_of(item)
    return f"{THINK_START}{thinking[:cut]}{THINK_END}{item.answer}"


def tokens(text: str) -> list[int]:
    """Token ids of ``text`` (whole markers, single characters otherwise)."""
    vocab = vocabulary(thinking=True)
    out: list[int] = []
    while text:
        marker = next((m for m in (THINK_START, THINK_END) if text.startswith(m)), None)
        piece = marker or text[0]
        out.append(vocab[piece])
        text = text[len(piece) :]
    return out


def encode_batch(batch: Sequence[AdditionProblem], rng: random.Random, cut_share: float) -> Any:
    import torch

    vocab = vocabulary(thinking=True)
    rows, starts = [], []
    for item in batch:
        cut = None
        if rng.random() < cut_share:
            cut = rng.randint(0, len(thinking_of(item)))
        prompt = tokens(item.problem)
        rows.append(prompt + tokens(completion(item, cut)) + [vocab[EOS]])
        starts.append(len(prompt))
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), vocab[PAD], dtype=torch.long)
    targets = torch.full((len(rows), width), -100, dtype=torch.long)
    for i, (row, start) in enumerate(zip(rows, starts, strict=True)):
        ids[i, : len(row)] = torch.tensor(row)
        targets[i, start - 1 : len(row) - 1] = ids[i, start : len(row)]
    return ids, targets


def greedy(model: Any, prompts: Sequence[str], batch_size: int = 500) -> list[str]:
    """Greedy continuations of ``prompts`` (all of one token length), up to the end token."""
    import torch

    vocab = vocabulary(thinking=True)
    chars = {index: token for token, index in vocab.items()}
    out: list[str] = []
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(prompts), batch_size):
            ids = torch.tensor([tokens(p) for p in prompts[start : start + batch_size]])
            width = ids.shape[1]
            for _ in range(MAX_NEW):
                logits = model(input_ids=ids).logits[:, -1, :]
                ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
            for row in ids[:, width:].tolist():
                text = ""
                for token in row:
                    if token == vocab[EOS]:
                        break
                    text += chars[token]
                out.append(text)
    model.train()
    return out


def accuracies(model: Any, items: Sequence[AdditionProblem]) -> dict[str, float]:
    """Greedy accuracy of the sum after full thinking (``think``), after a block closed
    after its first column (``cut``) and after an empty block (``off``)."""
    full = greedy(model, [p.problem for p in items])
    cut = greedy(model, [p.problem + completion(p, 2).removesuffix(p.answer) for p in items])
    off = greedy(model, [p.problem + THINK_START + THINK_END for p in items])
    return {
        "think": _share(full, [completion(p) for p in items]),
        "cut": _share(cut, [p.answer for p in items]),
        "off": _share(off, [p.answer for p in items]),
    }


def _share(got: Sequence[str], want: Sequence[str]) -> float:
    return sum(g == w for g, w in zip(got, want, strict=True)) / max(1, len(want))


def train(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from transformers import Qwen2ForCausalLM

    from experiments.tiny_models.model import model_config

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model: Any = Qwen2ForCausalLM(model_config(vocab_size=len(vocabulary(thinking=True))))
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    stream, rng = iter_problems("train", args.seed), random.Random(args.seed)
    validation = problems("validation", args.eval_size, seed=args.seed)
    checkpoints: list[Checkpoint] = []
    history: list[tuple[int, float, dict[str, float]]] = []
    started, step = time.monotonic(), 0
    for step in range(1, args.steps + 1):
        lr = learning_rate(step - 1, peak=args.lr, warmup=args.warmup, total=args.steps)
        for group in optimizer.param_groups:
            group["lr"] = lr
        batch = [next(stream) for _ in range(args.batch)]
        loss = train_step(model, optimizer, *encode_batch(batch, rng, args.cut_share))
        out_of_time = time.monotonic() - started > args.max_minutes * 60
        if step % args.eval_every == 0 or step == args.steps or out_of_time:
            acc = accuracies(model, validation)
            seconds = time.monotonic() - started
            state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            checkpoints.append(Checkpoint(step, seconds, acc["think"], state))
            history.append((step, round(seconds, 1), acc))
            print(f"step {step:5d}  {seconds:6.1f}s  loss {loss:.4f}  {acc}", flush=True)
            if args.save_every_eval:  # an interim model to look at while it trains
                from experiments.tiny_models.model import save_model
                from experiments.tiny_models.tokenizer import build_tokenizer

                save_model(model, build_tokenizer(thinking=True), args.out)
            if acc["think"] >= args.target_accuracy or out_of_time:
                break
    chosen = pick(checkpoints, args.target_accuracy)
    model.load_state_dict(chosen.state)
    model.eval()
    wall = time.monotonic() - started
    return {"model": model, "chosen": chosen, "history": history, "wall": wall, "steps": step}


def write_record(out: Path, args: argparse.Namespace, result: dict[str, Any]) -> None:
    import torch
    import transformers

    chosen: Checkpoint = result["chosen"]
    parameters = sum(p.numel() for p in result["model"].parameters())
    rows = "\n".join(
        f"| {s} | {sec} | {a['think']:.3f} | {a['cut']:.3f} | {a['off']:.3f} |"
        for s, sec, a in result["history"]
    )
    (out / "TRAINED_WITH.md").write_text(f"""# How this model was trained

The thinking variant of `ponder-addition`: the same {parameters:,}-parameter Qwen2 shape
over the character vocabulary plus the tokens `<think>` and `</think>`, trained from
scratch to write the column sums inside a thinking block before the sum
(`347+589=` -> `<think>16 13 9</think>936<eos>`); {args.cut_share:.0%} of the rows close
the thinking early and still end with the sum. Its chat template takes Qwen3's
`enable_thinking: false` (an empty thinking block in the generation prompt). Serve it with
vLLM's `--reasoning-parser qwen3` (or `deepseek_r1`).
Code: `experiments/tiny_models/think_train.py`.

- Command: `python -m experiments.tiny_models.think_train {shlex.join(sys.argv[1:])}`
- Seed: {args.seed}; batch {args.batch}; AdamW lr {args.lr} (cosine over {args.steps}
  steps); {args.threads} CPU thread(s)
- Steps run: {result["steps"]}; shipped checkpoint: step {chosen.step}
  ({chosen.seconds:.0f} s into training); wall time {result["wall"]:.0f} s
- Greedy accuracy of the shipped checkpoint ({args.eval_size} validation problems):
  {chosen.accuracy:.3f} with full thinking
- Versions: torch {torch.__version__}, transformers {transformers.__version__}

Greedy accuracy during training (think: whole completion right; cut: the sum after a block
closed after one column; off: the sum after an empty block):

| step | seconds | think | cut | off |
|---:|---:|---:|---:|---:|
{rows}
""")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target-accuracy", type=float, default=0.95)
    parser.add_argument("--cut-share", type=float, default=0.3)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--max-minutes", type=float, default=10.0)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--eval-size", type=int, default=500)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--save-every-eval", action="store_true")
    args = parser.parse_args(argv)

    from experiments.tiny_models.model import save_model
    from experiments.tiny_models.tokenizer import build_tokenizer

    result = train(args)
    save_model(result["model"], build_tokenizer(thinking=True), args.out)
    write_record(args.out, args, result)
    print(f"saved {args.out}: step {result['chosen'].step}, think {result['chosen'].accuracy}")


if __name__ == "__main__":
    main()
