"""s1's budget forcing (simplescaling/s1): think up to 32,000 tokens, ignore the end of
thinking once by writing "Wait", greedy; the thinking stops at ``<|im_start|>``'s token
id, opens in the prompt, and a capped thinking closes with "Final Answer:".

>>> RECIPE.served.sampling.temperature
0.0
"""

from __future__ import annotations

from clients.eval.recipes.recipe import Evaluation, Recipe, Reported, Sampling, Served

__all__ = ["RECIPE"]

_VLLM = "eval/lm-evaluation-harness/lm_eval/models/vllm_causallms.py"

RECIPE = Recipe(
    name="s1",
    title="s1 budget forcing: 32,000 thinking tokens, one 'Wait', temperature 0",
    reference="https://github.com/simplescaling/s1",
    served=Served(
        spec=(
            'budget_forcing(mode="ignore", waits=1, max_thinking_tokens=32000, cue="Wait", '
            'stop_token_id=151644, open_thinking=true, cap_marker="\\nFinal Answer:")'
        ),
        sampling=Sampling(temperature=0.0, max_tokens=32768),
        answer_format="after_answer_marker",
        serve_flags=(
            "--thinking",
            "--thinking-start",
            "<|im_start|>think",
            "--thinking-end",
            "<|im_start|>answer",
        ),
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
        'README.md:128 (ignore_str = "Wait")',
        f"{_VLLM}:246 and :273-280 (the thinking stops at <|im_start|>'s token id, vLLM's "
        "stop_token_ids with min_tokens 1: stop_token_id=151644, <|im_start|> in the s1 "
        "models' Qwen2.5 tokenizer)",
        f"{_VLLM}:239 and :283 (the thinking start <|im_start|>think is written into the prompt: "
        "open_thinking=true, --thinking-start)",
        f"{_VLLM}:240 (the thinking end <|im_start|>answer: --thinking-end)",
        f"{_VLLM}:254 and :401-409 (a thinking cut at its cap closes with a newline, the end "
        'marker and "\\nFinal Answer:": cap_marker)',
        "eval/lm-evaluation-harness/lm_eval/tasks/aime/utils.py:247-262 (reader: after the "
        "answer marker, the last boxed, else what follows 'Answer:': answer_format "
        "after_answer_marker)",
    ),
    differs=(
        "the reference builds the prompt from token ids; Ponder goes through the engine's chat "
        "template, continuing an assistant message that holds <|im_start|>think",
        "the thinking cap: eval/commands.sh:15 runs max_tokens_thinking=auto (the context left "
        f"after the prompt, less 100: {_VLLM}:261-265); the recipe caps at a fixed 32000 "
        "(README.md:87)",
    ),
)
