"""The spec language: the compact grammar (:mod:`~scaffolds.spec.grammar`), the strategy
registry and building a strategy from a spec (:mod:`~scaffolds.spec.build`).

>>> from scaffolds.spec.build import build_strategy, spec_string
>>> spec_string(build_strategy("gsr(n=4)"))
'gsr(n=4)'
"""
