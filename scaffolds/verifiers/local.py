"""A generative verifier in process: a transformers causal LM on the CPU.

:class:`LocalVerifier` asks the same question as
:class:`~scaffolds.verifiers.generative.GenerativeVerifier` (:data:`VERIFY_TEMPLATE`,
rendered with the tokenizer's chat template when it has one) and reads the answer from a
forward pass over a batch of candidates (left-padded, with position ids that start at 0
at each row's first token, so that a row scores as it does alone): at the last position,
``p(yes) / (p(yes) + p(no))`` over the yes/no spellings that are one token each
("yes", " yes", "Yes", " Yes", and the same for no). No token is generated, so it spends
none of a run's generated-token budget; its prompt tokens and one call go in ``usage``.

Concurrent :meth:`~LocalVerifier.verify` calls (the runs of a server's requests, the
problems of ``ponder eval``) share forward passes
(:class:`~scaffolds.verifiers.batching.RowBatcher`): a call that finds the model idle
runs at once; calls that arrive meanwhile go together in the next forward, up to
``max_batch`` rows (sorted by length, to pad little). The default, :data:`MAX_BATCH`, is
sized for a server whose engine batches hundreds of sequences, as vLLM does; a forward's
memory grows with its rows times their length, so long solutions on a small machine want
fewer (a served model's ``verifier_max_batch``). Each caller gets its own scores and its
own ``usage`` (its rows' prompt tokens, one call). In float32 a row scores the same
in any batch (to ~1e-5); in bfloat16 a left-padded row's score moves by rounding (up to
0.06 on SmolLM2-135M in ``benchmarks/local_verifier.py``; bfloat16 alone is ~0.03 from
float32), as it already did between the candidates of one call (``dtype="float32"`` for
scores that do not depend on their batch, at about 2.5x the CPU time).

A process verifier (an adapter that ``ponder train verifier --process`` trained: its
``ponder_training.json`` names the row kind ``verify_step``) is asked about each step
prefix of a candidate when the run gives the step separator (``beam``,
``particle_filter``): the candidate's per-step scores are those prefixes' scores, and its
score the last one's (:func:`~scaffolds.verifiers.generative.step_prefixes`); all the
prefixes go through the same forward passes as any other rows.

The model loads in the dtype its folder was saved in (``dtype="auto"``, as vLLM's
``--dtype auto``: a prepared SmolLM2 is bfloat16, which a CPU with AVX512-BF16 or AMX
runs about 2.5x faster than float32; an adapter takes its base's), or ``dtype``.
It loads on first use, on one worker thread (torch and transformers are imported
there), and the forward passes run one at a time on that thread.

>>> verifier = LocalVerifier("scaffolds/models/ponder-addition")
>>> verifier.name, verifier.requests(8), verifier.loaded, verifier.process, verifier.max_batch
('local:ponder-addition', 1, False, False, 256)
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

from scaffolds.dependencies import require
from scaffolds.engines.local_generate import encode_prompt
from scaffolds.engines.protocol import Usage, Verdicts
from scaffolds.verifiers.batching import RowBatcher
from scaffolds.verifiers.generative import step_prefixes, verify_prompt

__all__ = ["MAX_BATCH", "LocalVerifier", "answer_token_ids", "is_process_verifier"]

MAX_BATCH = 256
"""Rows per forward pass by default (vLLM's default ``max_num_seqs``)."""

SPELLINGS = {"yes": ("yes", " yes", "Yes", " Yes"), "no": ("no", " no", "No", " No")}


class LocalVerifier:
    """The verifier in ``model_dir``: a transformers model directory (or a LoRA adapter's),
    or the name of a known model (``ponder models list``), prepared on first use."""

    generated_tokens = 0

    def __init__(
        self, model_dir: str | Path, *, max_batch: int = MAX_BATCH, dtype: str = "auto"
    ) -> None:
        require("local", "a local verifier (local:DIR)", modules=("torch", "transformers"))
        self.model_dir = Path(model_dir)
        self.dtype = dtype
        if not self.model_dir.exists():  # a known model's name: unknown ones fail here
            from scaffolds.models import get_model

            get_model(str(model_dir))
        self.name = f"local:{self.model_dir.name}"
        self.max_batch = max_batch
        self.process = is_process_verifier(self.model_dir)
        self._loaded: _Loaded | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="local-verifier")
        self._batcher = RowBatcher(self._score_rows, self._executor, max_rows=max_batch)

    @property
    def loaded(self) -> bool:
        return self._loaded is not None

    def requests(self, count: int) -> int:
        return 1

    async def verify(
        self, problem: str, candidates: Sequence[str], *, step: str | None = None
    ) -> Verdicts:
        if not (self.process and step):
            rows = await self._batcher.run([(problem, c) for c in candidates])
            usage = Usage(prompt_tokens=sum(tokens for _, tokens in rows), calls=1)
            return Verdicts(tuple(score for score, _ in rows), usage=usage)
        prefixes = [step_prefixes(c, step) for c in candidates]
        rows = await self._batcher.run([(problem, p) for group in prefixes for p in group])
        scores = [score for score, _ in rows]
        steps: list[tuple[float, ...]] = []
        for group in prefixes:
            steps.append(tuple(scores[: len(group)]))
            scores = scores[len(group) :]
        return Verdicts(
            tuple(s[-1] for s in steps),
            tuple(steps),
            usage=Usage(prompt_tokens=sum(tokens for _, tokens in rows), calls=1),
        )

    def _load(self) -> _Loaded:
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
            takes = inspect.signature(model.forward).parameters
            extra = {"logits_to_keep": 1} if "logits_to_keep" in takes else {}
            self._loaded = _Loaded(
                model, tokenizer, answer_token_ids(tokenizer), "position_ids" in takes, extra
            )
        return self._loaded

    def _score_rows(self, rows: list[tuple[str, str]]) -> list[tuple[float, int]]:
        """Each (problem, candidate) row's score and prompt tokens, on the worker thread:
        the rows sorted by length, ``max_batch`` per forward pass."""
        import torch

        loaded = self._load()
        tokenizer = loaded.tokenizer
        chat = bool(getattr(tokenizer, "chat_template", None))
        encoded = [
            encode_prompt(tokenizer, verify_prompt(p, c, chat=chat), add_special_tokens=True)
            for p, c in rows
        ]
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
        scores = [0.0] * len(encoded)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        for start in range(0, len(order), self.max_batch):
            chunk = order[start : start + self.max_batch]
            width = max(len(encoded[i]) for i in chunk)
            ids = torch.tensor([[pad] * (width - len(encoded[i])) + encoded[i] for i in chunk])
            mask = torch.tensor(
                [[0] * (width - len(encoded[i])) + [1] * len(encoded[i]) for i in chunk]
            )
            inputs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask, **loaded.extra}
            if loaded.position_ids:  # each row's positions start at its first real token
                inputs["position_ids"] = (mask.cumsum(-1) - 1).clamp_min(0)
            with torch.inference_mode():
                logits = loaded.model(**inputs).logits[:, -1, :]
            probs = torch.softmax(logits.float(), dim=-1)
            yes = probs[:, loaded.answers["yes"]].sum(dim=-1)
            no = probs[:, loaded.answers["no"]].sum(dim=-1)
            for i, score in zip(chunk, (yes / (yes + no).clamp_min(1e-12)).tolist(), strict=True):
                scores[i] = float(score)
        return [(score, len(e)) for score, e in zip(scores, encoded, strict=True)]

    async def aclose(self) -> None:
        """Fail the calls still waiting and let the worker thread go."""
        await self._batcher.aclose()
        self._executor.shutdown(wait=False, cancel_futures=True)


class _Loaded(NamedTuple):
    model: Any
    tokenizer: Any
    answers: dict[str, list[int]]
    position_ids: bool  # the model's forward takes explicit position ids
    extra: dict[str, Any]  # ``logits_to_keep=1`` where the forward takes it


def _merged_adapter(folder: Path, dtype: str) -> Any:
    """A LoRA adapter's folder loaded onto its base with the adapter merged into the
    weights (in float32, then cast to ``dtype``; ``auto``: the base's saved dtype).
    Unmerged, peft's float32 adapter layers on a bfloat16 base ran a CPU forward 25x
    slower than the merged model."""
    require("train", "a local verifier's LoRA adapter", modules=("peft",))
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
