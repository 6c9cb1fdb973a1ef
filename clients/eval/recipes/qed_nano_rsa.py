"""RSA in QED-Nano's evaluation, with its pairwise tournament
(``eval/configs/agents/rsa_agent.yaml``).

>>> "select=\\"pairwise\\"" in RECIPE.served.spec
True
"""

from __future__ import annotations

from clients.eval.recipes.recipe import Evaluation, PromptKey, Recipe, Reported, Sampling, Served

__all__ = ["RECIPE"]

_COMPONENTS = "CMU-AIRe/QED-Nano eval/configs/agents/math_core_components.yaml"

RECIPE = Recipe(
    name="qed-nano-rsa",
    title="QED-Nano with RSA: 8 solutions, 3 rounds, blocks of 3, pairwise selection",
    reference="https://github.com/CMU-AIRe/QED-Nano",
    served=Served(
        spec='rsa(n=8, k=3, rounds=3, draw="balanced", select="pairwise", candidates="full")',
        sampling=Sampling(max_tokens=229376),
        answer_format="boxed",
        prompt_keys=(
            PromptKey("rsa_aggregate", f"{_COMPONENTS}:329 (merger)"),
            PromptKey("rsa_select", f"{_COMPONENTS}:218 (selector)"),
        ),
    ),
    evaluation=Evaluation(
        "lm-provers/ProofBench", samples=1, metrics=("judge score",), grader="judge"
    ),
    reported=Reported(
        "close to Gemini 3 Pro on IMOProofBench, ahead of GPT-OSS-120B (in words)",
        "CMU-AIRe/QED-Nano eval/README.md:17",
    ),
    sources=(
        "eval/configs/agents/rsa_agent.yaml:5 (select_pairwise: true)",
        "eval/configs/agents/rsa_agent.yaml:6 (n_solutions: 8)",
        "eval/configs/agents/rsa_agent.yaml:7 (n_rounds: 3)",
        "eval/configs/agents/rsa_agent.yaml:8 (block_size: 3)",
        "eval/configs/models/vllm/vllm-lm-provers-qed-nano.yaml:6 (max_tokens: 229376)",
    ),
    differs=(
        "the tournament's verdict: QED-Nano's selector answers with letters (A/B/equal); "
        "Ponder reads digits until the letter reader lands (issue 51, finding 5)",
        "per-component system prompts (math_core_components.yaml's sysprompt) cannot be set yet",
        "the proof judge: QED-Nano grades with its own grader model and guidelines; "
        "ponder eval's judge uses its rubric (--rubric)",
    ),
)
