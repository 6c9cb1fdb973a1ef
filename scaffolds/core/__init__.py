"""The run kernel: what every scaffold run is made of.

The run's context and its engine calls (:mod:`~scaffolds.core.context`,
:mod:`~scaffolds.core.engine_calls`, :mod:`~scaffolds.core.traced_call`), the budget
ledger, forced answers, the trace, thinking models and
:func:`~scaffolds.core.run.run_scaffold`. It builds on the modules below it at the top of
``scaffolds``: the problem and its budget (:mod:`~scaffolds.problem`), fan-out
(:mod:`~scaffolds.fanout`) and the exception hierarchy (:mod:`~scaffolds.errors`), which
engines, prompts and evaluation share without importing the kernel. It names no strategy
and no engine implementation.
"""
