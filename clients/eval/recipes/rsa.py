"""Recursive Self-Aggregation as HyperPotatoNeo/RSA's ``eval_loop.py`` runs it.

>>> RECIPE.served.spec
'rsa(n=16, k=4, rounds=9, candidates="full", draw="independent", select="majority")'
"""

from __future__ import annotations

from clients.eval.recipes.recipe import Evaluation, PromptKey, Recipe, Reported, Sampling, Served

__all__ = ["RECIPE"]

RECIPE = Recipe(
    name="rsa",
    title="RSA: population 16, k=4, 10 loops (the first population and 9 aggregations)",
    reference="https://github.com/HyperPotatoNeo/RSA",
    served=Served(
        spec='rsa(n=16, k=4, rounds=9, candidates="full", draw="independent", select="majority")',
        sampling=Sampling(temperature=1.0, max_tokens=8192),
        answer_format="boxed",
        prompt_keys=(
            PromptKey("rsa_aggregate", "HyperPotatoNeo/RSA eval_loop.py:145 (aggregate_prompt)"),
            PromptKey(
                "rsa_select",
                "none: the reference has no selection prompt; Ponder requires the key today "
                "even with select=majority, which never uses it (issue 51, finding 7): any text "
                "with $problem and $candidates",
            ),
        ),
    ),
    evaluation=Evaluation(
        "aime25", samples=1, metrics=("mean_acc_k per round", "majority", "pass@k")
    ),
    reported=Reported(
        "not transcribed yet: the paper's AIME-25 table",
        "RSA (Venkatraman et al., 2025), HyperPotatoNeo/RSA README.md:5",
    ),
    sources=(
        "eval_loop.py:694 (--dataset ./data/aime25/train.parquet)",
        "eval_loop.py:696 (--k 4)",
        "eval_loop.py:697 (--population 16)",
        "eval_loop.py:699 (--loops 10)",
        "eval_loop.py:700 (--max-new-tokens 8192)",
        "eval_loop.py:701 (--temperature 1.0)",
        "eval_loop.py:698 (--summarize-cot off: candidates are the full texts)",
        "eval_loop.py:531 (mean_acc_k)",
    ),
    differs=(
        "the first population: the reference's data adds an instruction to each problem "
        "(eval_loop.py:578, the parquet's prompt column); Ponder sends the problem through "
        "its solve template until the rsa_initial template lands (issue 51, finding 4)",
        "the metric: ponder eval scores the last population's majority; per-round mean_acc_k "
        "and pass@k are in the saved traces until the report carries them (finding 2)",
        "reader: the reference reads the last \\boxed{} anywhere, thinking included "
        '(eval_loop.py:347); Ponder reads "boxed" after the thinking until "boxed_anywhere" lands',
    ),
)
