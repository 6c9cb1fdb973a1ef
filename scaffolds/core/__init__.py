"""The run kernel: what every scaffold run is made of.

The problem and its budget (:mod:`~scaffolds.core.problem`), the run's context and its
engine calls (:mod:`~scaffolds.core.context`, :mod:`~scaffolds.core.engine_calls`,
:mod:`~scaffolds.core.traced_call`), the budget ledger, forced answers, fan-out, the
trace, thinking models, the exception hierarchy and :func:`~scaffolds.core.run.run_scaffold`.
It names no strategy and no engine implementation.
"""
