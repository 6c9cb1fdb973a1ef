"""Self-Refine on GSM (madaan/self-refine ``src/gsm/run.py``): up to 4 attempts,
feedback with the history, each step at the reference's temperature, the answer the
last fixed solution.

>>> RECIPE.served.spec.startswith("self_refine(max_rounds=4, history=true")
True
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
        spec=(
            "self_refine(max_rounds=4, history=true, solve_temperature=0, "
            'feedback_temperature=0.7, refine_temperature=0.7, answer="refined", '
            'solver=single(prompt="solve"))'
        ),
        sampling=Sampling(),
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
        f"{_RUN}:21 and :104 (the first solution at --temperature, 0.0: solve_temperature=0)",
        f"{_RUN}:27 (feedback at temperature 0.7: feedback_temperature=0.7; the same call "
        "writes the fixed program: refine_temperature=0.7)",
        f"{_RUN}:44 (stops at 'it is correct')",
        f"{_RUN}:65 (the answer is the last attempt's fixed program: answer=refined)",
    ),
    differs=(
        "the answer: the reference runs the program (PAL, code-davinci-002) and scores its "
        "result; Ponder reads the text's answer (lenient)",
        "the reference writes feedback and the fixed program in one call and stops when "
        "'it is correct' appears anywhere in the feedback; Ponder takes two calls per round "
        "(with answer=refined a 'correct' verdict costs one more call) and reads the verdict "
        "from the feedback's last line",
        "the reference's per-call caps (300 tokens and a blank-line stop for the first "
        "program, 600 and ### END for the feedback) are the request's max_tokens/stop here",
        "its 'accuracy at attempt i' (a problem right when any solution up to attempt i ran "
        "to the answer, gsm_selfref_eval.py) is not in ponder eval's report",
    ),
)
