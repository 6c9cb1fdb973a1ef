"""Build a tiny random Llama model offline, for running a real vLLM engine in tests.

Nothing is downloaded: the config is written by hand, the byte-level BPE tokenizer is
trained on text generated here, and the weights are random. vLLM's CPU attention needs
a head_dim it supports, so the model has hidden 128, 2 heads (head_dim 64), 1 KV head.

Run with an interpreter that has torch and transformers (e.g. the vLLM venv)::

    .venv-vllm/bin/python -m testing.tiny_llama /tmp/tiny-llama
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def corpus(seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words = [
        "the",
        "problem",
        "solution",
        "answer",
        "step",
        "reason",
        "summary",
        "candidate",
        "check",
        "final",
        "boxed",
        "compute",
        "add",
        "sum",
        "total",
        "number",
        "value",
        "first",
        "then",
        "so",
        "therefore",
        "because",
        "we",
        "is",
        "are",
        "of",
        "to",
        "and",
        "in",
        "a",
        "let",
        "find",
        "what",
        "how",
        "many",
        "each",
        "more",
        "less",
        "than",
        "equal",
        "result",
        "attempt",
    ]
    lines = []
    for _ in range(3000):
        a, b = rng.randint(0, 999), rng.randint(0, 999)
        lines.append(f"{a}+{b}={a + b}")
        lines.append(" ".join(rng.choice(words) for _ in range(12)) + " \\boxed{" + str(a) + "}")
        lines.append(
            "### Problem\n### Instructions\n### Summary " + " ".join(rng.choices(words, k=6))
        )
    return lines


def build(out: Path, vocab_size: int = 1024, seed: int = 0) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(corpus(seed), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
    )
    fast.chat_template = CHATML_TEMPLATE
    fast.save_pretrained(out)

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=2048,
        eos_token_id=fast.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=fast.convert_tokens_to_ids("<|endoftext|>"),
        bos_token_id=None,
        tie_word_embeddings=True,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    generation = {"eos_token_id": config.eos_token_id, "pad_token_id": config.pad_token_id}
    (out / "generation_config.json").write_text(json.dumps(generation))
    return out


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "tiny-llama")
    print(build(target))
