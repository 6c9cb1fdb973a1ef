"""Batch evaluation client: run scaffolds over a dataset, grade, compare accuracy to compute.

The pieces: :mod:`~clients.eval.runner` (requests, resume), :mod:`~clients.eval.served`
(what the server's ``/v1/models`` says of the model), :mod:`~clients.eval.report`
and :mod:`~clients.eval.plots`, and the ``ponder eval`` command line in
:mod:`~clients.eval.cli`. Problems, graders, the results file, the evaluation loop and
the paired statistics are the evaluation core's, shared with training and the
experiments (:mod:`scaffolds.evaluation`).

From Python (a server must be running)::

    from scaffolds.evaluation.grading import MathGrader
    from scaffolds.evaluation.problems import load_problems

    problems = load_problems("gsm8k", limit=50).problems
    config = EvalConfig("http://127.0.0.1:8000/v1", "m", ["gsr(n=4)"], Path("runs/x"))
    grader = MathGrader(answer_format=config.answer_format)  # boxed, as the run reads
    outcome, report = asyncio.run(evaluate(config, problems, grader))
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "EvalConfig": "runner",
    "run_eval": "runner",
    "evaluate": "pipeline",
    "write_reports": "pipeline",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Import the public names lazily, so ``ponder --help`` stays fast."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"clients.eval.{_EXPORTS[name]}"), name)
