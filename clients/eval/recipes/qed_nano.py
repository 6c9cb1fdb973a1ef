"""What QED-Nano's recipes share (CMU-AIRe/QED-Nano): its benchmark and number, its
generation cap, and what any of its agents' recipes leaves out.

>>> EVALUATION.dataset, MAX_TOKENS
('lm-provers/ProofBench', 229376)
"""

from __future__ import annotations

from clients.eval.recipes.recipe import Evaluation, Reported

__all__ = ["DIFFERS", "EVALUATION", "MAX_TOKENS", "MAX_TOKENS_SOURCE", "REPORTED"]

MAX_TOKENS = 229376
MAX_TOKENS_SOURCE = "eval/configs/models/vllm/vllm-lm-provers-qed-nano.yaml:6 (max_tokens: 229376)"
"""Where :data:`MAX_TOKENS` comes from: the QED-Nano model's vLLM config."""

EVALUATION = Evaluation(
    "lm-provers/ProofBench", samples=1, metrics=("judge score",), grader="judge"
)

REPORTED = Reported(
    "close to Gemini 3 Pro on IMOProofBench, ahead of GPT-OSS-120B (in words)",
    "CMU-AIRe/QED-Nano eval/README.md:17",
)

DIFFERS = (
    "QED-Nano's agent framework (retries, logging) is not reproduced",
    "the number: eval/README.md:17 says it of IMOProofBench and names no agent; the "
    "recipe runs lm-provers/ProofBench (eval/README.md:42)",
)
"""What every QED-Nano recipe's run differs in, after its own proof-judge line."""
