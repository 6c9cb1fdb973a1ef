"""The addition model: a ~1M-parameter Qwen2 built from a hand-written config.

4 layers, hidden 128, 4 attention heads (head_dim 32, which vLLM's CPU attention
supports), intermediate 512, tied embeddings, over the character vocabulary of
:mod:`experiments.tiny_models.tokenizer`. Positions go up to 2,048 (rotary, so they cost no
parameters) so an engine may serve it with a long ``max_model_len``.

>>> config = model_config(vocab_size=63)
>>> config.num_hidden_layers, config.hidden_size, config.head_dim, config.tie_word_embeddings
(4, 128, 32, True)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from experiments.tiny_models.tokenizer import EOS, PAD, vocabulary

MAX_POSITIONS = 2048


def model_config(vocab_size: int | None = None, **sizes: Any) -> Any:
    """The ``Qwen2Config`` of the addition model; ``sizes`` override its dimensions
    (tests build a smaller model over the same vocabulary this way)."""
    from transformers import Qwen2Config

    vocab = vocabulary()
    settings: dict[str, Any] = dict(
        vocab_size=vocab_size if vocab_size is not None else len(vocab),
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=32,
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=vocab[EOS],
        pad_token_id=vocab[PAD],
        use_cache=True,
    )
    settings.update(sizes)
    return Qwen2Config(**settings)


def build_model(seed: int = 0) -> Any:
    """A freshly initialised ``Qwen2ForCausalLM`` (fp32), deterministic for ``seed``."""
    import torch
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(seed)
    return Qwen2ForCausalLM(model_config())


def count_parameters(model: Any) -> int:
    """Distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())


def save_model(model: Any, tokenizer: Any, out: str | Path, *, dtype: str = "bfloat16") -> Path:
    """Save weights (safetensors, in ``dtype``), config, tokenizer and generation config."""
    import torch

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    copy = type(model)(model.config)
    copy.load_state_dict(model.state_dict())
    copy = copy.to(getattr(torch, dtype))
    copy.config.use_cache = True
    copy.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    # Only token ids: sampling defaults here would silently become vLLM's defaults.
    generation = {
        "bos_token_id": None,
        "eos_token_id": model.config.eos_token_id,
        "pad_token_id": model.config.pad_token_id,
    }
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    return out
