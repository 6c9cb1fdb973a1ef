"""A generative verifier in process: a transformers causal LM on the CPU.

:class:`LocalVerifier` asks the same question as
:class:`~scaffolds.verifiers.generative.GenerativeVerifier` (:data:`VERIFY_TEMPLATE`,
rendered with the tokenizer's chat template when it has one) and reads the answer from
ONE forward pass over the whole batch of candidates (left-padded): at the last position,
``p(yes) / (p(yes) + p(no))`` over the yes/no spellings that are one token each
("yes", " yes", "Yes", " Yes", and the same for no). No token is generated, so it spends
none of a run's generated-token budget; its prompt tokens and one call go in ``usage``.

A process verifier (an adapter that ``ponder train verifier --process`` trained: its
``ponder_training.json`` names the row kind ``verify_step``) is asked about each step
prefix of a candidate when the run gives the step separator (``beam``,
``particle_filter``): the candidate's per-step scores are those prefixes' scores, and its
score the last one's (:func:`~scaffolds.verifiers.generative.step_prefixes`); all the
prefixes of a batch go through the same forward passes.

The model loads in the dtype its folder was saved in (``dtype="auto"``, as vLLM's
``--dtype auto``: a prepared SmolLM2 is bfloat16, which a CPU with AVX512-BF16 or AMX
runs about 2.5x faster than float32; an adapter takes its base's), or ``dtype``.
It loads on first use, on one worker thread (torch and transformers are imported
there), and batches run one at a time on that thread.

>>> verifier = LocalVerifier("scaffolds/models/ponder-addition")
>>> verifier.name, verifier.requests(8), verifier.loaded, verifier.process
('local:ponder-addition', 1, False, False)
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from scaffolds.engines.local_generate import encode_prompt
from scaffolds.engines.protocol import Usage, Verdicts
from scaffolds.verifiers.generative import step_prefixes, verify_prompt

__all__ = ["LocalVerifier", "answer_token_ids", "is_process_verifier"]

SPELLINGS = {"yes": ("yes", " yes", "Yes", " Yes"), "no": ("no", " no", "No", " No")}


class LocalVerifier:
    """The verifier in ``model_dir``: a transformers model directory (or a LoRA adapter's),
    or the name of a known model (``ponder models list``), prepared on first use."""

    generated_tokens = 0

    def __init__(self, model_dir: str | Path, *, max_batch: int = 32, dtype: str = "auto") -> None:
        self.model_dir = Path(model_dir)
        self.dtype = dtype
        if not self.model_dir.exists():  # a known model's name: unknown ones fail here
            from scaffolds.models import get_model

            get_model(str(model_dir))
        self.name = f"local:{self.model_dir.name}"
        self.max_batch = max_batch
        self.process = is_process_verifier(self.model_dir)
        self._loaded: tuple[Any, Any, dict[str, list[int]]] | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="local-verifier")

    @property
    def loaded(self) -> bool:
        return self._loaded is not None

    def requests(self, count: int) -> int:
        return 1

    async def verify(
        self, problem: str, candidates: Sequence[str], *, step: str | None = None
    ) -> Verdicts:
        loop = asyncio.get_running_loop()
        if not (self.process and step):
            scores, prompt_tokens = await loop.run_in_executor(
                self._executor, self._score, problem, list(candidates)
            )
            return Verdicts(tuple(scores), usage=Usage(prompt_tokens=prompt_tokens, calls=1))
        prefixes = [step_prefixes(c, step) for c in candidates]
        flat = [p for group in prefixes for p in group]
        scores, prompt_tokens = await loop.run_in_executor(
            self._executor, self._score, problem, flat
        )
        steps: list[tuple[float, ...]] = []
        for group in prefixes:
            steps.append(tuple(scores[: len(group)]))
            scores = scores[len(group) :]
        return Verdicts(
            tuple(s[-1] for s in steps),
            tuple(steps),
            usage=Usage(prompt_tokens=prompt_tokens, calls=1),
        )

    def _load(self) -> tuple[Any, Any, dict[str, list[int]]]:
        if self._loaded is None:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            folder = self.model_dir
            if not folder.exists():  # a known model, prepared (merged) on first use
                from scaffolds.models.prepare import prepare_model

                folder = prepare_model(str(folder))
            tokenizer = AutoTokenizer.from_pretrained(folder)
            if (folder / "adapter_config.json").exists():
                model = _merged_adapter(folder, self.dtype)
            else:
                model = AutoModelForCausalLM.from_pretrained(folder, dtype=self.dtype)
            model.eval()
            self._loaded = (model, tokenizer, answer_token_ids(tokenizer))
        return self._loaded

    def _score(self, problem: str, candidates: list[str]) -> tuple[list[float], int]:
        import torch

        model, tokenizer, answers = self._load()
        chat = bool(getattr(tokenizer, "chat_template", None))
        encoded = [
            encode_prompt(tokenizer, verify_prompt(problem, c, chat=chat), add_special_tokens=True)
            for c in candidates
        ]
        scores: list[float] = []
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        for start in range(0, len(encoded), self.max_batch):
            rows = encoded[start : start + self.max_batch]
            width = max(len(r) for r in rows)
            ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
            mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
            with torch.inference_mode():
                logits = model(input_ids=ids, attention_mask=mask).logits[:, -1, :]
            probs = torch.softmax(logits.float(), dim=-1)
            yes = probs[:, answers["yes"]].sum(dim=-1)
            no = probs[:, answers["no"]].sum(dim=-1)
            scores.extend(float(s) for s in (yes / (yes + no).clamp_min(1e-12)))
        return scores, sum(len(r) for r in encoded)

    async def aclose(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _merged_adapter(folder: Path, dtype: str) -> Any:
    """A LoRA adapter's folder loaded onto its base with the adapter merged into the
    weights (in float32, then cast to ``dtype``; ``auto``: the base's saved dtype).
    Unmerged, peft's float32 adapter layers on a bfloat16 base ran a CPU forward 25x
    slower than the merged model."""
    import torch
    from peft.tuners.tuners_utils import BaseTunerLayer
    from transformers import AutoConfig, AutoModelForCausalLM

    model: Any = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    for module in model.modules():
        if isinstance(module, BaseTunerLayer):
            module.merge()
    if dtype == "auto":
        base = json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"]
        dtype = str(getattr(AutoConfig.from_pretrained(base), "dtype", None) or "float32")
    return model.to(getattr(torch, dtype.removeprefix("torch.")))


def answer_token_ids(tokenizer: Any) -> dict[str, list[int]]:
    """The token ids of the yes and no spellings that are one token each; a tokenizer
    that has neither word as one token cannot serve as a verifier (a ``ValueError``)."""
    out: dict[str, list[int]] = {}
    for word, spellings in SPELLINGS.items():
        ids = {
            tokens[0]
            for s in spellings
            if len(tokens := tokenizer(s, add_special_tokens=False)["input_ids"]) == 1
        }
        if not ids:
            raise ValueError(f"the tokenizer has no single token for {word!r}")
        out[word] = sorted(ids)
    return out


def is_process_verifier(model_dir: str | Path) -> bool:
    """Whether the model in ``model_dir`` was trained on per-step rows (``verify_step``)."""
    meta = Path(model_dir) / "ponder_training.json"
    try:
        kinds = json.loads(meta.read_text()).get("kinds") or []
    except (OSError, ValueError, AttributeError):
        return False
    return "verify_step" in kinds
