"""DeepConf offline, as facebookresearch/deepconf's ``examples/example_offline.py`` runs it:
DeepConf-low keeps the most confident 10% of 512 traces, DeepConf-high 90%.

>>> LOW.served.spec.replace("0.1, window", "0.9, window") == HIGH.served.spec
True
"""

from __future__ import annotations

from clients.eval.recipes.recipe import Evaluation, Recipe, Reported, Sampling, Served

__all__ = ["HIGH", "LOW"]

_SAMPLING = Sampling(temperature=1.0, top_p=1.0, top_k=40, max_tokens=130000)
_SOURCES = (
    "examples/example_offline.py:176 (--dataset aime25.jsonl)",
    "examples/example_offline.py:182 (--budget 512)",
    "examples/example_offline.py:184 (--window_size 2048)",
    "examples/example_offline.py:186 (--max_tokens 130000)",
    "examples/example_offline.py:192-196 (temperature 1.0, top_p 1.0, top_k 40)",
    "examples/example_offline.py:237 (logprobs=20)",
    "deepconf/utils.py:116 (bottom-window confidence: windows of 2048, the bottom 10%)",
    "deepconf/utils.py:150 (filter_top_confidence: keep the top_percent most confident)",
    "deepconf/utils.py:41-50 (a token's confidence: the mean over vLLM's dict, the sampled "
    "token included)",
    "deepconf/utils.py:282-292 and :13-37 (reader: the last brace-balanced boxed of the "
    "whole output, thinking included: answer_format boxed_anywhere)",
)
_DIFFERS = (
    "offline only: the online mode (warm-up traces set a threshold, later traces stop "
    "early) is not implemented",
    "the token confidence on vLLM's chat endpoint: the reference averages vLLM's whole "
    "per-token dict (the sampled token besides the top 20, deepconf/utils.py:41-50); vLLM's "
    "completions endpoint returns that dict, its chat endpoint the dict's first 20 entries, "
    "the sampled token first, so where the sampled token is outside the top 20 the 20th is "
    "missing from Ponder's mean",
    "the reference rounds each token's confidence to 3 decimals (deepconf/utils.py:49); "
    "Ponder does not",
)


def _recipe(name: str, keep: float, reported: Reported, differs: tuple[str, ...]) -> Recipe:
    return Recipe(
        name=name,
        title=f"DeepConf offline, 512 traces, keep the most confident {keep:.0%} (bottom window)",
        reference="https://github.com/facebookresearch/deepconf",
        served=Served(
            spec=(
                f'deepconf(n=512, keep={keep}, window=2048, top_k=20, measure="bottom", bottom=0.1)'
            ),
            sampling=_SAMPLING,
            answer_format="boxed_anywhere",
        ),
        evaluation=Evaluation("aime25", samples=1, metrics=("accuracy", "tokens")),
        reported=reported,
        sources=_SOURCES,
        differs=(*differs, *_DIFFERS),
    )


LOW = _recipe(
    "deepconf-low",
    0.1,
    Reported(
        "up to 99.9% on AIME 2025 (GPT-OSS-120B, DeepConf@512) with up to 84.7% fewer "
        "generated tokens than full parallel thinking",
        "Fu et al., Deep Think with Confidence, arXiv 2508.15260, abstract",
    ),
    (
        "the number: the abstract's 99.9% is its best setting ('up to'; which confidence "
        "measure and share kept is in the paper's tables, not reachable from here), and its "
        "84.7% fewer tokens can only come from the online mode's early stopping "
        "(README.md:105-106), which this offline recipe does not run: offline generates all "
        "512 traces",
    ),
)
HIGH = _recipe(
    "deepconf-high",
    0.9,
    Reported(
        "not transcribed: the paper's keep-90% offline rows are in its tables, which no source "
        "reachable from here gives (facebookresearch/deepconf's README and examples publish no "
        "paper numbers; the abstract gives only its best setting)",
        "Fu et al., Deep Think with Confidence, arXiv 2508.15260",
    ),
    (),
)
