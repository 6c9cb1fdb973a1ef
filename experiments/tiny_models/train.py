"""Train the addition model from scratch, stopping at a target validation accuracy.

The model learns direct addition (``347+589=`` -> ``936<eos>``, loss on the answer and
the end token only) with a plain PyTorch loop: AdamW, cosine learning rate with a short
warm-up, batch 128, one CPU thread. Every ``--eval-every`` steps it decodes
``--eval-size`` held-out validation problems greedily. Training stops at the first
evaluation that reaches ``--target-accuracy``; of that checkpoint and the one evaluated
before it, the one closer to the target is saved. Scaffolds need headroom to show
anything, so the shipped model is deliberately mediocre (about 0.6, not 1.0).

Run (about 5-10 minutes on one busy CPU thread)::

    python -m experiments.tiny_models.train --out scaffolds/models/ponder-addition --seed 0 \\
        --target-accuracy 0.6

The output directory gets safetensors weights, ``config.json``, the tokenizer files,
``generation_config.json`` and ``TRAINED_WITH.md`` (command, seed, steps, wall time,
validation accuracy and a test accuracy measured again from the saved files).
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.tiny_models.tokenizer import EOS, PAD, vocabulary
from scaffolds.evaluation.addition_task import AdditionProblem, iter_problems, problems

ANSWER_TOKENS = 5
"""Greedy decoding budget: at most four digits and the end token."""


def encode_batch(batch: Sequence[AdditionProblem]) -> tuple[Any, Any]:
    """Token ids (right-padded) and next-token targets, -100 outside answer and end token.

    ``targets[i, t]`` is the token that should follow ``ids[i, :t + 1]``.
    """
    import torch

    vocab = vocabulary()
    rows = [
        [vocab[c] for c in p.problem] + [vocab[c] for c in p.answer] + [vocab[EOS]] for p in batch
    ]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), vocab[PAD], dtype=torch.long)
    targets = torch.full((len(rows), width), -100, dtype=torch.long)
    for i, (row, item) in enumerate(zip(rows, batch, strict=True)):
        ids[i, : len(row)] = torch.tensor(row)
        start = len(item.problem)
        targets[i, start - 1 : len(row) - 1] = ids[i, start : len(row)]
    return ids, targets


def greedy_answers(
    model: Any, items: Sequence[AdditionProblem], batch_size: int = 512
) -> list[str]:
    """Greedy answers of ``model`` to ``items`` (all prompts have the same length)."""
    import torch

    vocab = vocabulary()
    chars = {index: token for token, index in vocab.items()}
    out: list[str] = []
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(items), batch_size):
            chunk = items[start : start + batch_size]
            ids = torch.tensor([[vocab[c] for c in p.problem] for p in chunk])
            prompt_len = ids.shape[1]
            for _ in range(ANSWER_TOKENS):
                logits = model(input_ids=ids).logits[:, -1, :]
                ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
            for row in ids[:, prompt_len:].tolist():
                text = ""
                for token in row:
                    if token == vocab[EOS]:
                        break
                    text += chars[token]  # a special token here makes the answer wrong
                out.append(text)
    model.train()
    return out


def train_step(model: Any, optimizer: Any, ids: Any, targets: Any) -> float:
    """One next-token cross-entropy step (targets -100 are ignored, gradients clipped at
    1.0); returns the loss. Every demo trainer steps through this."""
    import torch

    logits = model(input_ids=ids).logits
    loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100
    )
    loss.backward()  # type: ignore[no-untyped-call]
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss.item())


def accuracy(answers: Sequence[str], items: Sequence[AdditionProblem]) -> float:
    return sum(a == p.answer for a, p in zip(answers, items, strict=True)) / max(1, len(items))


def learning_rate(step: int, *, peak: float, warmup: int, total: int) -> float:
    """Linear warm-up, then cosine decay to 10% of ``peak`` at ``total`` steps.

    >>> learning_rate(0, peak=1.0, warmup=10, total=100)
    0.1
    >>> round(learning_rate(100, peak=1.0, warmup=10, total=100), 3)
    0.1
    """
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


@dataclass
class Checkpoint:
    step: int
    seconds: float
    accuracy: float
    state: dict[str, Any] = field(repr=False)


def pick(checkpoints: Sequence[Checkpoint], target: float) -> Checkpoint:
    """The checkpoint to ship: if the last one reached ``target``, whichever of it and the
    one before is closer to the target; otherwise the most accurate one.

    >>> cps = [Checkpoint(1, 0, 0.5, {}), Checkpoint(2, 0, 0.9, {})]
    >>> pick(cps, 0.6).step, pick(cps, 0.8).step, pick(cps[:1], 0.6).step
    (1, 2, 1)
    """
    last = checkpoints[-1]
    if last.accuracy >= target and len(checkpoints) > 1:
        before = checkpoints[-2]
        return min((last, before), key=lambda c: abs(c.accuracy - target))
    return max(checkpoints, key=lambda c: c.accuracy)


def train(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from experiments.tiny_models.model import build_model, count_parameters

    torch.set_num_threads(args.threads)
    model = build_model(args.seed)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    stream = iter_problems("train", args.seed)
    validation = problems("validation", args.eval_size, seed=args.seed)
    checkpoints: list[Checkpoint] = []
    started = time.monotonic()
    step = 0
    columns = (
        TextColumn("[bold]train"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("loss {task.fields[loss]:.3f}  val {task.fields[acc]}"),
    )
    with Progress(*columns) as progress:
        bar = progress.add_task("train", total=args.steps, loss=float("nan"), acc="-")
        for step in range(1, args.steps + 1):
            lr = learning_rate(step - 1, peak=args.lr, warmup=args.warmup, total=args.steps)
            for group in optimizer.param_groups:
                group["lr"] = lr
            ids, targets = encode_batch([next(stream) for _ in range(args.batch)])
            loss = train_step(model, optimizer, ids, targets)
            progress.update(bar, advance=1, loss=loss)
            out_of_time = time.monotonic() - started > args.max_minutes * 60
            if step % args.eval_every == 0 or step == args.steps or out_of_time:
                acc = accuracy(greedy_answers(model, validation), validation)
                seconds = time.monotonic() - started
                state = {k: v.detach().clone() for k, v in model.state_dict().items()}
                checkpoints.append(Checkpoint(step, seconds, acc, state))
                progress.update(bar, acc=f"{acc:.3f}")
                progress.console.print(
                    f"step {step:5d}  {seconds:6.1f}s  lr {lr:.2e}  loss {loss:.4f}  "
                    f"val greedy {acc:.3f}"
                )
                if acc >= args.target_accuracy or out_of_time:
                    break
    wall = time.monotonic() - started
    chosen = pick(checkpoints, args.target_accuracy)
    model.load_state_dict(chosen.state)
    model.eval()
    return {
        "model": model,
        "parameters": count_parameters(model),
        "chosen": chosen,
        "history": [(c.step, round(c.seconds, 1), c.accuracy) for c in checkpoints],
        "steps_run": step,
        "wall_seconds": wall,
    }


def verify_saved(out: Path, count: int = 200) -> float:
    """Greedy test accuracy of the saved files, through transformers' ``generate``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(out))
    model: Any = AutoModelForCausalLM.from_pretrained(str(out))
    model.eval()
    items = problems("test", count)
    prompts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": p.problem}], tokenize=False, add_generation_prompt=True
        )
        for p in items
    ]
    batch = tokenizer(prompts, return_tensors="pt", add_special_tokens=False)
    with torch.inference_mode():
        output = model.generate(
            **batch,
            max_new_tokens=ANSWER_TOKENS,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
        )
    texts = tokenizer.batch_decode(
        output[:, batch["input_ids"].shape[1] :], skip_special_tokens=True
    )
    return accuracy([t.strip() for t in texts], items)


def write_record(
    out: Path, args: argparse.Namespace, result: dict[str, Any], test_acc: float
) -> None:
    import torch
    import transformers

    chosen: Checkpoint = result["chosen"]
    weights = sum(f.stat().st_size for f in out.glob("*.safetensors"))
    history = "\n".join(f"| {s} | {sec} | {a:.3f} |" for s, sec, a in result["history"])
    command = "python -m experiments.tiny_models.train " + shlex.join(sys.argv[1:])
    text = f"""# How this model was trained

A {result["parameters"]:,}-parameter Qwen2 (4 layers, hidden 128, 4 heads of 32, intermediate
512, tied embeddings, character vocabulary) trained from scratch on three-digit addition
(`347+589=` -> `936<eos>`), stopped near a target greedy accuracy so that scaffolds have
headroom. Code: `experiments/tiny_models/` (task, tokenizer, model, train).

- Command: `{command}`
- Seed: {args.seed}; batch {args.batch}; AdamW lr {args.lr} (warm-up {args.warmup}, cosine
  over {args.steps} steps); {args.threads} CPU thread(s)
- Steps run: {result["steps_run"]}; shipped checkpoint: step {chosen.step}
  ({chosen.seconds:.0f} s into training)
- Wall time of the training loop: {result["wall_seconds"]:.0f} s
- Validation greedy accuracy of the shipped checkpoint: {chosen.accuracy:.3f}
  ({args.eval_size} validation problems, fp32, during training)
- Test greedy accuracy of the saved {args.dtype} files through transformers
  `generate` (200 test problems, chat template): {test_acc:.3f}
- Weights: {args.dtype} safetensors, {weights:,} bytes
- Versions: torch {torch.__version__}, transformers {transformers.__version__}

Validation accuracy during training:

| step | seconds | val greedy |
|---:|---:|---:|
{history}
"""
    (out / "TRAINED_WITH.md").write_text(text)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target-accuracy", type=float, default=0.6)
    parser.add_argument("--steps", type=int, default=3000, help="cosine horizon and step cap")
    parser.add_argument("--max-minutes", type=float, default=15.0)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--eval-size", type=int, default=500)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    args = parser.parse_args(argv)

    from experiments.tiny_models.model import save_model
    from experiments.tiny_models.tokenizer import build_tokenizer

    result = train(args)
    save_model(result["model"], build_tokenizer(), args.out, dtype=args.dtype)
    test_acc = verify_saved(args.out)
    write_record(args.out, args, result, test_acc)
    chosen = result["chosen"]
    print(
        f"saved {args.out}: step {chosen.step}, val greedy {chosen.accuracy:.3f}, "
        f"test greedy (saved {args.dtype}) {test_acc:.3f}, wall {result['wall_seconds']:.0f}s"
    )


if __name__ == "__main__":
    main()
