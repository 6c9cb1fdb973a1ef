"""Reasoning Cache as IanYHWu/rc's inference code runs it (``inference/commands.md``).

>>> RECIPE.served.spec.startswith("rc(steps=12")
True
"""

from __future__ import annotations

from clients.eval.recipes.recipe import Evaluation, PromptKey, Recipe, Reported, Sampling, Served

__all__ = ["RECIPE"]

RECIPE = Recipe(
    name="rc",
    title="Reasoning Cache, 12 steps, 16 samples (RCT-4B's decoding)",
    reference="https://github.com/IanYHWu/rc",
    served=Served(
        spec=(
            'rc(steps=12, template="one", summarizer_thinking="same", '
            "reasoning_tokens=16384, summary_tokens=2048)"
        ),
        sampling=Sampling(temperature=1.0, top_p=1.0),
        answer_format="boxed_anywhere",
        prompt_keys=(
            PromptKey(
                "rc_reasoning",
                "IanYHWu/rc inference/commands.md:7 (--reasoning_prompt_path "
                "sum_e2e_complete_reasoning_prompt.txt, read by "
                "inference/inference/generate_complete.py)",
            ),
            PromptKey(
                "rc_summary",
                "IanYHWu/rc inference/commands.md:8 (--summarization_prompt_path "
                "sum_e2e_complete_summarization_prompt.txt)",
            ),
        ),
    ),
    evaluation=Evaluation("aime25", samples=16, metrics=("accuracy", "pass@k", "maj@k")),
    reported=Reported(
        "RCT-4B on HMMT 2025: from 40% to nearly 70% with 0.5M tokens at test time (in words)",
        "Wu et al., Reasoning Cache: Continual Improvement Over Long Horizons via Short-Horizon "
        "RL, arXiv 2602.03773, abstract (IanYHWu/rc README.md:3)",
    ),
    sources=(
        "inference/commands.md:10 (--n 16)",
        "inference/commands.md:11 (--max_steps 12)",
        "inference/commands.md:12-13 (--temperature 1.0, --top_p 1.0)",
        "inference/commands.md:14 (--max_thinking_tokens 16384)",
        "inference/inference/generate_complete.py:499 (--max_summarization_tokens 2048)",
        "inference/commands.md:6 (HMMT November 2025: inference/datasets/hmmt_2025_nov.json, "
        "30 problems)",
        "inference/utils/evaluators.py:13-25 (reader: the last \\boxed{} of the whole output, "
        "thinking included: answer_format boxed_anywhere)",
    ),
    differs=(
        "reader: the recipe reads with boxed_anywhere (the last brace-balanced \\boxed{} of "
        "the whole output, thinking included); RC's own regex (inference/utils/evaluators.py:23) "
        "reads braces one level deep only, so it finds no answer in "
        "\\boxed{\\frac{\\sqrt{3}}{2}}: the recipe keeps RC's where-to-read and not that loss",
        "dataset: the reference's run is HMMT November 2025 (commands.md:6; the repository "
        "ships it as inference/datasets/hmmt_2025_nov.json); the recipe uses aime25",
        "the paper's number is at 0.5M test-time tokens per problem; the recipe's 12 steps of "
        "at most 16,384 reasoning and 2,048 summary tokens spend at most about 0.22M "
        "(commands.md:11 and :14, generate_complete.py:499): a longer horizon than the recipe "
        "runs, and the paper's per-step numbers were not reachable from here (the repository "
        "publishes no results table)",
        "each sample advances on its own, where the reference steps all samples together",
        "the reference opens <think> in the prompt itself; Ponder leaves it to the chat template",
    ),
)
