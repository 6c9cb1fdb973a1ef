"""The evaluation core, shared by ``ponder eval``, training rewards and the experiments:
final answers and their equivalence (:mod:`~scaffolds.evaluation.answers`, checked in a
pool under a time limit by :mod:`~scaffolds.evaluation.answer_pool`).
"""
