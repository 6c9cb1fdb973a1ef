"""The built-in scaffolds. Each wraps an inner ``solver``, so they compose.

Importing this package defines them; each marks itself with
:func:`~scaffolds.strategies.base.register`, which is all the default registry reads.

>>> from scaffolds.strategies import GSR, RC
>>> GSR(n=4, solver=RC(steps=3)).max_calls()
18
"""

from scaffolds.strategies.abstraction import Abstraction
from scaffolds.strategies.adaptive import Adaptive
from scaffolds.strategies.base import Solution, Strategy, register
from scaffolds.strategies.best_of_n import BestOfN
from scaffolds.strategies.budget_forcing import BudgetForcing
from scaffolds.strategies.deepconf import DeepConf
from scaffolds.strategies.gsr import GSR
from scaffolds.strategies.majority import Majority
from scaffolds.strategies.rc import RC
from scaffolds.strategies.rsa import RSA
from scaffolds.strategies.self_refine import SelfRefine
from scaffolds.strategies.single import Single

__all__ = [
    "GSR",
    "RC",
    "RSA",
    "Abstraction",
    "Adaptive",
    "BestOfN",
    "BudgetForcing",
    "DeepConf",
    "Majority",
    "SelfRefine",
    "Single",
    "Solution",
    "Strategy",
    "register",
]
