"""GSR-style fine-tuning of the addition model, and its direct-only control.

GSR (arXiv 2509.00084) trains the refine step on (problem + N candidates -> a correct
solution), mixed with plain solving from the start so direct skill does not collapse.
Here:

- candidates: ``n`` answers sampled (temperature 1.0) from the *base* model for each of
  ``data_problems`` training problems, by batched ``model.generate`` (the sampler
  LocalEngine uses, batched over problems for speed); with ``refreshes`` they are
  redrawn from the model being trained during the run, so the refine step also sees
  candidates like the ones it reads when served (issue 20: training only on the base
  model's candidates left the refine step far below a single sample);
- refine rows: the compact prompt set's ``gsr_refine`` template, rendered exactly as
  the ``gsr`` scaffold renders it (``347+589=[936,926,936,946]``) -> the correct answer;
  every problem is kept, including those whose candidates are all wrong;
- direct rows: ``347+589=`` -> ``936``, fresh training problems;
- batches of 128: ``refine_fraction`` refine rows, the rest direct (control: all direct).

Training is the demo's own loop (as :mod:`experiments.tiny_models.train`: AdamW, loss on the
completion and end token only, one CPU thread), not TRL's SFTTrainer: for a 1M-parameter
model the trainer's per-step overhead would eat much of a fixed wall-time budget, and a
time budget needs the learning-rate schedule to follow the clock (warm-up, then cosine
over the elapsed fraction of ``seconds``, down to 10%).

>>> rows = refine_rows([AdditionProblem(3, 4)], [["7", "8"]])
>>> rows[0]["prompt"], rows[0]["completion"], rows[0]["candidates_correct"]
('3+4=[7,8]', '7', 1)
>>> direct_row(AdditionProblem(3, 4))["prompt"]
'3+4='
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.tiny_models.tokenizer import EOS, PAD, vocabulary
from scaffolds.evaluation.addition_task import AdditionProblem, iter_problems, problems

Row = dict[str, Any]
MAX_NEW_TOKENS = 8
"""The same per-call budget the experiments give the engine."""


def refine_rows(items: Sequence[AdditionProblem], candidates: Sequence[Sequence[str]]) -> list[Row]:
    """(problem + candidates) -> correct answer, the prompt from the compact ``gsr_refine``."""
    from scaffolds.strategies.gsr import REFINE
    from scaffolds.strategies.steps import render_step

    rows = []
    for item, cands in zip(items, candidates, strict=True):
        state = {"candidates": list(cands)}
        prompt = render_step(REFINE, item.problem, state, prompts="compact").prompt
        rows.append(
            {
                "prompt": prompt,
                "completion": item.answer,
                "kind": "gsr_refine",
                "id": item.id,
                "answer": item.answer,
                "candidates_correct": sum(c == item.answer for c in cands),
                "num_candidates": len(cands),
                "prompt_set": "compact",
            }
        )
    return rows


def direct_row(item: AdditionProblem) -> Row:
    """The problem as the compact ``solve`` template asks it -> its answer."""
    from scaffolds.strategies.single import DIRECT
    from scaffolds.strategies.steps import render_step

    prompt = render_step(DIRECT, item.problem, {"prompt": "solve"}, prompts="compact").prompt
    return {"prompt": prompt, "completion": item.answer, "kind": "direct", "id": item.id}


def sample_candidates(
    model: Any, tokenizer: Any, items: Sequence[AdditionProblem], n: int, *, batch: int = 1024
) -> list[list[str]]:
    """``n`` sampled answers per problem (temperature 1.0, no top-k/top-p), cut at EOS."""
    import torch

    eos = tokenizer.eos_token_id
    out: list[list[str]] = []
    with torch.inference_mode():
        for start in range(0, len(items), batch):
            chunk = items[start : start + batch]
            ids = torch.tensor([tokenizer(p.problem)["input_ids"] for p in chunk])
            gen = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                max_new_tokens=MAX_NEW_TOKENS,
                num_return_sequences=n,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=eos,
            )[:, ids.shape[1] :].tolist()
            texts = []
            for row in gen:
                cut = row.index(eos) if eos in row else len(row)
                texts.append(tokenizer.decode(row[:cut], skip_special_tokens=True))
            out.extend(texts[i : i + n] for i in range(0, len(texts), n))
    return out


def encode_rows(rows: Sequence[Row]) -> tuple[Any, Any]:
    """Right-padded ids and next-token targets; loss on the completion and EOS only."""
    import torch

    vocab = vocabulary()
    seqs = [[vocab[c] for c in r["prompt"] + r["completion"]] + [vocab[EOS]] for r in rows]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), vocab[PAD], dtype=torch.long)
    targets = torch.full((len(seqs), width), -100, dtype=torch.long)
    for i, (seq, row) in enumerate(zip(seqs, rows, strict=True)):
        ids[i, : len(seq)] = torch.tensor(seq)
        start = len(row["prompt"])
        targets[i, start - 1 : len(seq) - 1] = ids[i, start : len(seq)]
    return ids, targets


def lr_at(step: int, elapsed: float, *, peak: float, warmup: int, seconds: float) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine over wall time to 10% of peak.

    >>> lr_at(0, 0.0, peak=1.0, warmup=10, seconds=100)
    0.1
    >>> round(lr_at(50, 100.0, peak=1.0, warmup=10, seconds=100), 3)
    0.1
    """
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, elapsed / seconds)
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


def train(
    kind: str,
    base: Path,
    out: Path,
    *,
    seconds: float = 300.0,
    seed: int = 0,
    lr: float = 1e-3,
    batch: int = 128,
    warmup: int = 20,
    data_problems: int = 16_000,
    refine_fraction: float = 0.75,
    num_candidates: int = 4,
    steps: int | None = None,
    refreshes: int = 0,
) -> dict[str, Any]:
    """Fine-tune ``base`` for ``seconds`` of loop time: ``kind`` is ``gsr`` or ``control``.

    ``steps`` (optional) also caps the optimizer steps; with it the learning-rate
    schedule follows the steps instead of the clock, so the run does not depend on how
    loaded the machine is. ``refreshes`` redraws the refine rows' candidates from the
    model being trained that many times, evenly spaced over the run (at progress
    1/(r+1), 2/(r+1)...), so the refine step trains on candidates like the ones it reads
    when served (the trained model's own), not only on the base model's.
    """
    import torch
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from experiments.tiny_models.model import save_model
    from experiments.tiny_models.train import accuracy, greedy_answers, train_step

    if kind not in ("gsr", "control"):
        raise ValueError(f"kind must be 'gsr' or 'control' (got {kind!r})")
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    model: Any = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    info: dict[str, Any] = {"kind": kind, "base": str(base), "seconds": seconds, "seed": seed}
    info |= {"lr": lr, "batch": batch, "warmup": warmup, "max_steps": steps}
    refine: list[Row] = []
    if kind == "gsr":
        started = time.monotonic()
        model.eval()
        items = problems("train", data_problems, seed=seed + 1)
        refine = refine_rows(items, sample_candidates(model, tokenizer, items, num_candidates))
        right = [r["candidates_correct"] for r in refine]
        info |= {
            "data_seconds": round(time.monotonic() - started, 1),
            "refine_rows": len(refine),
            "refine_all_wrong": sum(r == 0 for r in right) / len(right),
            "candidate_accuracy": sum(right) / (num_candidates * len(right)),
            "refine_fraction": refine_fraction,
            "num_candidates": num_candidates,
            "example_refine_row": refine[0],
        }
        print(f"refine data: {len(refine)} rows in {info['data_seconds']}s", flush=True)
    refresh_at = [(i + 1) / (refreshes + 1) for i in range(refreshes)] if refine else []
    info["refreshes"] = []
    n_refine = round(batch * refine_fraction) if refine else 0
    rng = random.Random(seed)
    order: list[int] = []
    stream = iter_problems("train", seed + 2)
    validation = problems("validation", 500, seed=seed)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    step, loss_value, started = 0, float("nan"), time.monotonic()
    columns = (
        TextColumn(f"[bold]train {kind}"),
        BarColumn(),
        TimeElapsedColumn(),
        TextColumn("step {task.fields[step]} loss {task.fields[loss]:.3f}"),
    )
    with Progress(*columns) as progress:
        bar = progress.add_task(kind, total=seconds, step=0, loss=float("nan"))
        while (elapsed := time.monotonic() - started) < seconds and (steps is None or step < steps):
            clock = (elapsed, seconds) if steps is None else (float(step), float(steps))
            if refresh_at and clock[0] / clock[1] >= refresh_at[0]:
                refresh_at.pop(0)
                drawn = time.monotonic()
                model.eval()
                refine = refine_rows(
                    items, sample_candidates(model, tokenizer, items, num_candidates)
                )
                model.train()
                right = [r["candidates_correct"] for r in refine]
                info["refreshes"].append(
                    {
                        "step": step,
                        "seconds": round(time.monotonic() - drawn, 1),
                        "candidate_accuracy": sum(right) / (num_candidates * len(right)),
                        "refine_all_wrong": sum(r == 0 for r in right) / len(right),
                    }
                )
                order = []
                print(
                    f"refine candidates redrawn at step {step}: {info['refreshes'][-1]}", flush=True
                )
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, clock[0], peak=lr, warmup=warmup, seconds=clock[1])
            rows = []
            for _ in range(n_refine):
                if not order:
                    order = list(range(len(refine)))
                    rng.shuffle(order)
                rows.append(refine[order.pop()])
            rows += [direct_row(next(stream)) for _ in range(batch - n_refine)]
            ids, targets = encode_rows(rows)
            loss_value = train_step(model, optimizer, ids, targets)
            step += 1
            progress.update(bar, completed=time.monotonic() - started, step=step, loss=loss_value)
    info |= {"train_seconds": round(time.monotonic() - started, 1), "steps": step}
    info |= {"epochs_of_refine_data": step * n_refine / max(1, len(refine)) if refine else 0.0}
    info["final_loss"] = loss_value
    info["val_greedy_fp32"] = accuracy(greedy_answers(model, validation), validation)
    from experiments.tiny_models.tokenizer import build_tokenizer

    save_model(model, build_tokenizer(), out)
    (out / "gsr_train.json").write_text(json.dumps(info, indent=2) + "\n")
    print(
        f"{kind}: {step} steps in {info['train_seconds']}s, val greedy "
        f"{info['val_greedy_fp32']:.3f} -> {out}",
        flush=True,
    )
    return info
