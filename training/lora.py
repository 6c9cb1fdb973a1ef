"""LoRA for the trainers: which modules get adapters, and peft's config for them.

``targets`` is ``all-linear`` (every linear layer but the output head, peft's preset) or
a comma-separated list of module names, where the short names of a Llama/Qwen2 block
stand for their projections (``q`` -> ``q_proj``, ..., ``down`` -> ``down_proj``).
A LoRA run saves only the adapter (``adapter_model.safetensors`` and
``adapter_config.json``, a few MB); ``ponder models prepare --adapter`` merges it into
its base for serving.

>>> LoraSettings(targets="q,k,v,o").target_modules()
['q_proj', 'k_proj', 'v_proj', 'o_proj']
>>> LoraSettings().target_modules()
'all-linear'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from scaffolds.cli_options import Flag

__all__ = ["LoraSettings"]

SHORT_NAMES = {
    "q": "q_proj",
    "k": "k_proj",
    "v": "v_proj",
    "o": "o_proj",
    "gate": "gate_proj",
    "up": "up_proj",
    "down": "down_proj",
}


@dataclass(frozen=True)
class LoraSettings:
    """A LoRA adapter's shape: rank ``r``, scale ``alpha / r``, dropout, target modules."""

    r: Annotated[int, Flag(min=1)] = 16
    """LoRA rank"""
    alpha: Annotated[int, Flag(min=1)] = 32
    """LoRA alpha (scale alpha/r)"""
    dropout: float = 0.0
    """LoRA dropout"""
    targets: str = "all-linear"
    """all-linear, or modules e.g. q,k,v,o,gate,up,down"""

    def __post_init__(self) -> None:
        if self.r < 1:
            raise ValueError(f"lora r: must be >= 1 (got {self.r})")
        if self.alpha <= 0:
            raise ValueError(f"lora alpha: must be > 0 (got {self.alpha})")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"lora dropout: must be in [0, 1) (got {self.dropout})")
        if not self.target_modules():
            raise ValueError("lora targets: name at least one module, or all-linear")

    def target_modules(self) -> str | list[str]:
        if self.targets.strip() == "all-linear":
            return "all-linear"
        names = [part.strip() for part in self.targets.split(",") if part.strip()]
        return [SHORT_NAMES.get(name, name) for name in names]

    def peft_config(self) -> Any:
        """peft's ``LoraConfig`` for a causal LM."""
        from peft import LoraConfig

        return LoraConfig(
            r=self.r,
            lora_alpha=self.alpha,
            lora_dropout=self.dropout,
            target_modules=self.target_modules(),
            bias="none",
            task_type="CAUSAL_LM",
        )
