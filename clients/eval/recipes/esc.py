"""Early-stopping Self-Consistency (Yiwei98/ESC ``early_stop_math.py``): windows of 5
samples, stop at the first window that agrees, at most 40.

>>> RECIPE.served.spec
'adaptive(rule="esc", window=5, max_k=40, unanswered="count", solver=single(prompt="solve"))'
"""

from __future__ import annotations

from clients.eval.recipes.recipe import Evaluation, PromptKey, Recipe, Reported, Sampling, Served

__all__ = ["RECIPE"]

RECIPE = Recipe(
    name="esc",
    title="ESC on MATH: window 5, at most 40 samples, temperature 0.5",
    reference="https://github.com/Yiwei98/ESC",
    served=Served(
        spec=(
            'adaptive(rule="esc", window=5, max_k=40, unanswered="count", '
            'solver=single(prompt="solve"))'
        ),
        sampling=Sampling(temperature=0.5),
        answer_format="answer_is",
        prompt_keys=(
            PromptKey(
                "solve",
                "the paper's few-shot chain-of-thought prompt for MATH (Yiwei98/ESC ships "
                "only sampled outputs: early_stop_math.py:96 reads {model}_result/MATH/T0.5.jsonl)",
            ),
        ),
    ),
    evaluation=Evaluation("math500", samples=1, metrics=("accuracy", "samples per problem")),
    reported=Reported(
        "33.8% fewer samples on MATH, 80.1% fewer on GSM8K, at about the same accuracy",
        "Li et al., Escape Sky-high Cost, ICLR 2024 (arXiv 2401.10480), abstract",
    ),
    sources=(
        "early_stop_math.py:101 (window sizes 5, or the whole budget)",
        "early_stop_math.py:102 (budgets 8 to 64; 40 among them)",
        "early_stop_math.py:96 (samples drawn at temperature 0.5: T0.5.jsonl)",
        "early_stop_math.py:11-68 (reader: 'The answer is' first, then the last boxed, then "
        "the last number: answer_format answer_is)",
        "early_stop_math.py:136-145 (an empty prediction is one more value in its window, "
        "which then is not unanimous: unanswered=count)",
    ),
    differs=(
        "a window with no answer at all draws on, where ESC's would stop on five empty "
        "predictions (Ponder never stops on an empty window)",
        "dataset: the paper uses the whole MATH test set; the recipe uses math500",
    ),
)
