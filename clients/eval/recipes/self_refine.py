"""Self-Refine on GSM (madaan/self-refine ``src/gsm/run.py``): up to 4 attempts,
feedback with the history.

>>> RECIPE.served.spec
'self_refine(max_rounds=4, history=true)'
"""

from __future__ import annotations

from clients.eval.recipes.recipe import Evaluation, PromptKey, Recipe, Reported, Sampling, Served

__all__ = ["RECIPE"]

_RUN = "madaan/self-refine src/gsm/run.py"

RECIPE = Recipe(
    name="self-refine",
    title="Self-Refine on GSM8K: 4 attempts, stop at 'it is correct'",
    reference="https://github.com/madaan/self-refine",
    served=Served(
        spec="self_refine(max_rounds=4, history=true)",
        sampling=Sampling(temperature=0.0),
        answer_format="lenient",
        prompt_keys=(
            PromptKey("solve", f"{_RUN}:21 (data/prompt/gsm/init.txt)"),
            PromptKey("self_refine_feedback", f"{_RUN}:27 (data/prompt/gsm/feedback.txt)"),
            PromptKey("self_refine_feedback_history", f"{_RUN}:27 (data/prompt/gsm/feedback.txt)"),
            PromptKey("self_refine_refine", f"{_RUN}:27 (feedback.txt: the fixed program)"),
            PromptKey("self_refine_refine_history", f"{_RUN}:27 (feedback.txt: the fixed program)"),
            PromptKey(
                "self_refine_round", f"{_RUN}:27 (feedback.txt: how an earlier attempt reads)"
            ),
        ),
    ),
    evaluation=Evaluation("gsm8k", samples=1, metrics=("accuracy",)),
    reported=Reported(
        "about 20% absolute better on average over 7 tasks (GSM8K among them)",
        "Madaan et al., Self-Refine, arXiv 2303.17651, abstract",
    ),
    sources=(
        f"{_RUN}:101 (--max_attempts 4)",
        f"{_RUN}:104 (--temperature 0.0 for the first solution)",
        f"{_RUN}:27 (feedback at temperature 0.7)",
        f"{_RUN}:44 (stops at 'it is correct')",
    ),
    differs=(
        "sampling per step: the reference samples the first solution at 0 and feedback at "
        "0.7 (run.py:21,27); the recipe sends 0 to every step until per-step sampling lands "
        "(finding 9)",
        "the answer: the reference runs the program (PAL); Ponder reads the text's answer",
        "the reference writes feedback and the fixed program in one call; Ponder takes two "
        "calls per round",
    ),
)
