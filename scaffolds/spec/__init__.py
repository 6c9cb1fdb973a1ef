"""The spec language: the strategy registry (:mod:`~scaffolds.spec.registry`: the
built-ins and the ``ponder.scaffolds`` entry points) and building a strategy from a spec
(:mod:`~scaffolds.spec.build`). The compact grammar sits below strategies, in
:mod:`~scaffolds.spec_grammar`, so a strategy prints its own spec with it.

>>> from scaffolds.spec.build import build_strategy, spec_string
>>> spec_string(build_strategy("gsr(n=8)"))
'gsr(n=8)'
"""
