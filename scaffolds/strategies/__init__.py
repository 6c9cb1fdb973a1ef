"""The built-in scaffolds. Each wraps an inner ``solver``, so they compose.

>>> from scaffolds.strategies import GSR, RC
>>> GSR(n=4, solver=RC(steps=3)).max_calls()
18
"""

from scaffolds.strategies.abstraction import Abstraction
from scaffolds.strategies.base import Solution, Strategy
from scaffolds.strategies.best_of_n import BestOfN
from scaffolds.strategies.gsr import GSR
from scaffolds.strategies.majority import Majority
from scaffolds.strategies.rc import RC
from scaffolds.strategies.self_refine import SelfRefine
from scaffolds.strategies.single import Single

BUILTIN_STRATEGIES: tuple[type[Strategy], ...] = (
    Single,
    Majority,
    BestOfN,
    SelfRefine,
    RC,
    Abstraction,
    GSR,
)

__all__ = [
    "BUILTIN_STRATEGIES",
    "GSR",
    "RC",
    "Abstraction",
    "BestOfN",
    "Majority",
    "SelfRefine",
    "Single",
    "Solution",
    "Strategy",
]
