"""Adaptive-Consistency with the Beta stopping criterion
(Pranjal2041/AdaptiveConsistency ``adaptive_consistency/``).

>>> RECIPE.served.spec
'adaptive(wave=1, max_k=40, confidence=0.95, unanswered="drop", solver=single(prompt="solve"))'
"""

from __future__ import annotations

from clients.eval.recipes.recipe import Evaluation, PromptKey, Recipe, Reported, Sampling, Served

__all__ = ["RECIPE"]

RECIPE = Recipe(
    name="adaptive-consistency",
    title="Adaptive-Consistency: one sample at a time, Beta criterion at 0.95, at most 40",
    reference="https://github.com/Pranjal2041/AdaptiveConsistency",
    served=Served(
        spec=(
            'adaptive(wave=1, max_k=40, confidence=0.95, unanswered="drop", '
            'solver=single(prompt="solve"))'
        ),
        sampling=Sampling(temperature=0.7),
        answer_format="answer_is",
        prompt_keys=(
            PromptKey(
                "solve",
                "Pranjal2041/AdaptiveConsistency README.md:132 (download_data.sh: the "
                "datasets' few-shot prompts)",
            ),
        ),
    ),
    evaluation=Evaluation("gsm8k", samples=1, metrics=("accuracy", "samples per problem")),
    reported=Reported(
        "up to 6.0x fewer samples with an average accuracy drop under 0.1%",
        "Pranjal2041/AdaptiveConsistency README.md:30 (arXiv 2305.11860)",
    ),
    sources=(
        "adaptive_consistency/main.py:23 (max_gens=40, BetaStoppingCriteria)",
        "adaptive_consistency/stopping_criterias.py:19 (conf_thresh 0.95)",
        "adaptive_consistency/main.py (one generation at a time: wave=1)",
        "scripts/eval_outputs.py:16-28 (an empty answer is skipped before the stopping rule, "
        "and with none answered it draws on: unanswered=drop)",
        "scripts/pal/core/interface.py:58 and :85-96 (reader: 'answer is' in the last line: "
        "answer_format answer_is)",
    ),
    differs=(
        "the reader: the reference reads 'answer is' in the last line only "
        "(scripts/pal/core/interface.py:85-96); answer_is reads 'The answer is' on any line, "
        "then the last \\boxed{}, then the last number, so a sample the reference leaves "
        "unanswered may have an answer here",
        "the sampling temperature is not in the repository (its outputs were sampled by the "
        "paper's runs); 0.7 is the recipe's choice",
    ),
)
