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
        answer_format="boxed_anywhere",
        prompt_keys=(
            PromptKey("rsa_aggregate", "HyperPotatoNeo/RSA eval_loop.py:145 (aggregate_prompt)"),
            PromptKey(
                "rsa_initial",
                "HyperPotatoNeo/RSA data/aime25/test.parquet (the prompt column: each problem "
                "with the data's instruction, read at eval_loop.py:78-84 and :627-632, sent "
                "alone on the first loop at :426-428)",
            ),
            PromptKey(
                "candidate",
                "HyperPotatoNeo/RSA eval_loop.py:186-188 (each member under its "
                "'---- Solution i ----' heading)",
            ),
            PromptKey(
                "candidate_separator",
                "HyperPotatoNeo/RSA eval_loop.py:193 (the prompt's parts joined by a newline)",
            ),
        ),
    ),
    evaluation=Evaluation(
        "aime25", samples=1, metrics=("mean_acc_k per round", "majority", "pass@k")
    ),
    reported=Reported(
        "73.18 ± 2.20 Pass@1 on AIME-25 with Qwen3-4B-Instruct-2507 after 10 steps "
        "(N=16, K=4, the mean of 4 seeds; the model alone: 43.91)",
        "Venkatraman et al., Recursive Self-Aggregation, arXiv 2509.26626, Table 1 "
        "(rsa-llm/rsa-llm.github.io static/pdfs/Recursive_Self_Aggregation.pdf, p. 6)",
    ),
    sources=(
        "eval_loop.py:693 (--model Qwen/Qwen3-4B-Instruct-2507, Table 1's model)",
        "eval_loop.py:694 (--dataset ./data/aime25/train.parquet)",
        "eval_loop.py:696 (--k 4)",
        "eval_loop.py:697 (--population 16)",
        "eval_loop.py:699 (--loops 10)",
        "eval_loop.py:700 (--max-new-tokens 8192)",
        "eval_loop.py:701 (--temperature 1.0)",
        "eval_loop.py:698 (--summarize-cot off: candidates are the full texts)",
        "eval_loop.py:426-428 (the first loop has no candidates: the data's prompt alone, "
        "the rsa_initial template)",
        "eval_loop.py:345-350 (reader: last_boxed_only_string of the whole output, thinking "
        "included: answer_format boxed_anywhere)",
        "eval_loop.py:527-533 (per loop: mean_acc_k, mean_pass_at_k, mean_majority_acc, which "
        "ponder eval's report gives per round)",
    ),
    differs=(
        "the wording is the prompt file's: the run reads as the reference's only where the "
        "file copies rsa_initial, rsa_aggregate, candidate and candidate_separator from it "
        "(Ponder ships none of the reference's text)",
        "the paper's Pass@1 scores one member drawn at random from the last population "
        "(Recursive_Self_Aggregation.pdf p. 5, Termination): compare it with the last round's "
        "mean_acc_k in ponder eval's report, not with the majority answer the spec returns",
        "the paper's number is the mean of 4 seeds (Table 1); the recipe runs one "
        "(--samples 4 runs four)",
    ),
)
