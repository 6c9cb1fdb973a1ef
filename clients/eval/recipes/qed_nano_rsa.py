"""RSA in QED-Nano's evaluation, with its pairwise tournament
(``eval/configs/agents/rsa_agent.yaml``): letter verdicts, and each component's own
system prompt from the prompt file.

>>> 'verdict="letter"' in RECIPE.served.spec
True
"""

from __future__ import annotations

from clients.eval.recipes import qed_nano
from clients.eval.recipes.recipe import PromptKey, Recipe, Sampling, Served

__all__ = ["RECIPE"]

_COMPONENTS = "CMU-AIRe/QED-Nano eval/configs/agents/math_core_components.yaml"

RECIPE = Recipe(
    name="qed-nano-rsa",
    title="QED-Nano with RSA: 8 solutions, 3 rounds, blocks of 3, pairwise selection",
    reference="https://github.com/CMU-AIRe/QED-Nano",
    served=Served(
        spec=(
            'rsa(n=8, k=3, rounds=3, draw="balanced", select="pairwise", verdict="letter", '
            'candidates="full")'
        ),
        sampling=Sampling(max_tokens=qed_nano.MAX_TOKENS),
        answer_format="boxed",
        prompt_keys=(
            PromptKey("rsa_initial", f"{_COMPONENTS}:61 (solver: prompt)"),
            PromptKey("rsa_aggregate", f"{_COMPONENTS}:355 (merger: prompt)"),
            PromptKey("rsa_select", f"{_COMPONENTS}:307 (selector: prompt)"),
            PromptKey("rsa_initial_system", f"{_COMPONENTS}:41 (solver: sysprompt)"),
            PromptKey("rsa_aggregate_system", f"{_COMPONENTS}:330 (merger: sysprompt)"),
            PromptKey("rsa_select_system", f"{_COMPONENTS}:219 (selector: sysprompt)"),
        ),
    ),
    evaluation=qed_nano.EVALUATION,
    reported=qed_nano.REPORTED,
    sources=(
        "eval/configs/agents/rsa_agent.yaml:5 (select_pairwise: true)",
        "eval/configs/agents/rsa_agent.yaml:6 (n_solutions: 8)",
        "eval/configs/agents/rsa_agent.yaml:7 (n_rounds: 3)",
        "eval/configs/agents/rsa_agent.yaml:8 (block_size: 3)",
        "eval/src/imobench/agents/rsa_agent.py:24-43 (balanced blocks: each solution read by "
        "block_size mergers)",
        "eval/src/imobench/agents/math_core.py:272-313 (the selector's verdict: the first "
        "boxed letter or 'equal', any case; none, 'equal' or a letter past the pair keeps the "
        "last: verdict=letter)",
        "eval/src/imobench/agents/math_core.py:376-407 (each component's sysprompt and prompt "
        "from math_core_components.yaml: the rsa_*_system texts and rsa_* templates)",
        qed_nano.MAX_TOKENS_SOURCE,
    ),
    differs=(
        "the aggregation heads its candidates 1, 2, 3 (the shared candidate template's $index) "
        "where QED-Nano's merger letters them A, B, C (math_core.py:345-350)",
        "the proof judge: QED-Nano grades with its own grader model and guidelines; "
        "ponder eval's judge uses its rubric (--rubric)",
        *qed_nano.DIFFERS,
    ),
)
