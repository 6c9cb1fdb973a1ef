"""s1's budget forcing (simplescaling/s1 README): think up to 32,000 tokens, ignore the
end of thinking once by writing "Wait", greedy.

>>> RECIPE.served.sampling.temperature
0.0
"""

from __future__ import annotations

from clients.eval.recipes.recipe import Evaluation, Recipe, Reported, Sampling, Served

__all__ = ["RECIPE"]

RECIPE = Recipe(
    name="s1",
    title="s1 budget forcing: 32,000 thinking tokens, one 'Wait', temperature 0",
    reference="https://github.com/simplescaling/s1",
    served=Served(
        spec='budget_forcing(mode="ignore", waits=1, max_thinking_tokens=32000, cue="Wait")',
        sampling=Sampling(temperature=0.0, max_tokens=32768),
        answer_format="boxed",
        serve_flags=("--thinking", "--thinking-end", "<|im_start|>answer"),
    ),
    evaluation=Evaluation("aime24", samples=1, metrics=("accuracy",)),
    reported=Reported(
        "budget forcing takes s1-32B from 50% to 57% on AIME24",
        "Muennighoff et al., s1: Simple test-time scaling, arXiv 2501.19393, abstract",
    ),
    sources=(
        "README.md:87 (MAX_TOKENS_THINKING = 32000)",
        "README.md:101 (max_tokens=32768)",
        "README.md:105 (temperature=0.0)",
        "README.md:123 (the thinking opens with <|im_start|>think)",
        'README.md:128 (ignore_str = "Wait")',
    ),
    differs=(
        "the end of thinking: s1 stops at its token ids (README.md:115); Ponder at the marker "
        "text until the stop-token-id change lands (finding 9)",
        "the reference builds the raw prompt by hand (<|im_start|>think); Ponder goes through "
        "the engine's chat template",
        "reader: s1 reads after its answer marker with an 'Answer:' fallback; the recipe "
        "reads boxed",
    ),
)
