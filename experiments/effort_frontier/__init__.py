"""Issue 53: effort levels and ``auto`` against the fixed specs, by resampling committed
pools, and through served models (:mod:`experiments.effort_frontier.served`).

No model runs in ``pools`` or ``report``. The committed rows of two earlier studies hold,
per held-out problem (issue 20's 500 seed-2000 arithmetic problems), several independent
samples of the same prompt at T=0.7, 256 tokens, each with its answer and generated
tokens:

- the base SmolLM2-135M-Instruct: 12 a problem (``smollm2_refine/runs/smollm2-r1/eval/base``,
  gsr(n=4)'s four candidates x 3 seeds);
- the shipped ``smollm2-135m-gsr``: 24 a problem (``smollm2_refine/runs/smollm2-r2/eval/gsr``,
  12, and ``smollm2_verifier/runs/v1/candidates``, 12 more drawn by the same model with
  the same prompt and sampling).

``pools`` grades each sample against the problem's answer (normalized strings, as the
arithmetic answers are integers) and writes ``pools/MODEL.jsonl``. ``report`` resamples
them (:func:`clients.calibrate.simulate`: random orders of each problem's pool, each spec
run on each order as the scaffold runs), on the held-out half of the problems (odd
positions) after calibrating on the other half (even positions) with the same rules
``ponder calibrate`` uses (:func:`clients.calibrate.choose_levels`, ``auto``'s grid), and
writes ``results/report.{json,md}`` and ``results/accuracy_vs_tokens.png``.

What resampling cannot give: ``majority(k)`` beyond the pool (the base's largest is k=12,
not 16), ``adaptive``'s default ``max_k=32`` (run here at the pool's size), and
``gsr(n=4)`` (a refine step, not a vote of samples: its measured row is in RESULTS.md).

``served-run`` is the run through served models: per problem sixteen samples from one
``majority(k=16)`` request to ``ponder serve`` (the served pool), the levels and ``auto``
calibrated on its even half, and the held-out half sent once per ``reasoning_effort``
and as ``gsr(n=4)`` to ``ponder serve`` loading that policy (rows in ``served/``);
``served-report`` rebuilds ``results/served_report.{json,md}`` and
``results/served_accuracy_vs_tokens.png`` from those rows. Given several folders (one
``served-run --out`` a seed), it reports each seed, the seeds averaged per problem, and
``adaptive()`` at its default ``max_k=32`` on the seeds' pools of a problem together.
"""
