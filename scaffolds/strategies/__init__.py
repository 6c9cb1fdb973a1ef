"""The built-in scaffolds. Each wraps an inner ``solver``, so they compose.

The package is the strategies' public API: import the names in ``__all__`` from here.

:data:`BUILTINS` is THE list of built-ins: the default registry
(:func:`scaffolds.spec.registry.default_registry`) serves them, plus the scaffolds other
installed distributions declare (entry-point group ``ponder.scaffolds``). A new built-in
is its own module here, imported below and listed in :data:`BUILTINS`; the tests read the
list from the registry.

>>> from scaffolds.strategies import GSR, RC
>>> GSR(n=4, solver=RC(steps=3)).max_calls()
18
>>> sorted(cls.name for cls in BUILTINS)[:3]
['abstraction', 'adaptive', 'auto']
"""

from scaffolds.core.solution import Solution
from scaffolds.strategies.abstraction import Abstraction
from scaffolds.strategies.adaptive import Adaptive
from scaffolds.strategies.auto import Auto
from scaffolds.strategies.base import Strategy, register
from scaffolds.strategies.beam import Beam
from scaffolds.strategies.best_of_n import BestOfN
from scaffolds.strategies.budget_forcing import BudgetForcing
from scaffolds.strategies.deepconf import DeepConf
from scaffolds.strategies.gsr import GSR
from scaffolds.strategies.majority import Majority
from scaffolds.strategies.particle_filter import ParticleFilter
from scaffolds.strategies.rc import RC
from scaffolds.strategies.rsa import RSA
from scaffolds.strategies.self_refine import SelfRefine
from scaffolds.strategies.single import Single

BUILTINS: tuple[type[Strategy], ...] = (
    Single,
    Majority,
    BestOfN,
    SelfRefine,
    RC,
    Abstraction,
    GSR,
    RSA,
    Adaptive,
    DeepConf,
    BudgetForcing,
    Beam,
    ParticleFilter,
    Auto,
)
"""The built-in strategy classes, each served under its ``name``."""

__all__ = [
    "BUILTINS",
    "GSR",
    "RC",
    "RSA",
    "Abstraction",
    "Adaptive",
    "Auto",
    "Beam",
    "BestOfN",
    "BudgetForcing",
    "DeepConf",
    "Majority",
    "ParticleFilter",
    "SelfRefine",
    "Single",
    "Solution",
    "Strategy",
    "register",
]
