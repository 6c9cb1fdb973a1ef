"""Reasoning Cache in QED-Nano's evaluation (``eval/configs/agents/reasoning_cache.yaml``).

>>> RECIPE.evaluation.grader
'judge'
"""

from __future__ import annotations

from clients.eval.recipes import qed_nano
from clients.eval.recipes.recipe import PromptKey, Recipe, Sampling, Served

__all__ = ["RECIPE"]

_CONFIG = "CMU-AIRe/QED-Nano eval/configs/agents/reasoning_cache.yaml"
_AGENT = "CMU-AIRe/QED-Nano eval/src/imobench/agents/reasoning_cache.py"

RECIPE = Recipe(
    name="qed-nano-rc",
    title="QED-Nano with Reasoning Cache, 3 iterations, proofs judged",
    reference="https://github.com/CMU-AIRe/QED-Nano",
    served=Served(
        spec='rc(steps=3, template="one", reasoning_tokens=null)',
        sampling=Sampling(max_tokens=qed_nano.MAX_TOKENS),
        answer_format="boxed",
        prompt_keys=(
            PromptKey("rc_reasoning", f"{_CONFIG}:27 (solve_prompt)"),
            PromptKey("rc_summary", f"{_CONFIG}:5 (summarization_prompt)"),
            PromptKey("rc_first_summary", f"{_AGENT}:58 (the summary before the first one)"),
            PromptKey("rc_no_summary", f"{_AGENT}:58 (the same text, in the summary prompt)"),
        ),
    ),
    evaluation=qed_nano.EVALUATION,
    reported=qed_nano.REPORTED,
    sources=(
        f"{_CONFIG}:4 (n_iterations: 3)",
        qed_nano.MAX_TOKENS_SOURCE,
        "eval/README.md:42 (lm-provers/ProofBench)",
        f"{_AGENT}:23-26 (the summarizer is the solver's own model when the config names no "
        "summarizer_model, as reasoning_cache.yaml names none)",
    ),
    differs=(
        "the proof judge: QED-Nano grades with its own grader model and guidelines "
        "(eval/README.md:50-66); ponder eval's judge uses its rubric (--rubric)",
        *qed_nano.DIFFERS,
    ),
)
