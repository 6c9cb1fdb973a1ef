"""Named recipes: each paper's reported setting, runnable with ``ponder eval --recipe NAME``.

One module per reference holds its recipes as typed, frozen :class:`Recipe` objects
(checked by mypy, their citations beside the values, shipped with the package like any
module); :data:`RECIPES` names them all, in the README's order. ``ponder eval recipes``
lists them with the paper's number and what still differs.

>>> list(RECIPES)[:3]
['rc', 'qed-nano-rc', 'qed-nano-rsa']
>>> recipe_named("rsa").served.prompt_keys[0].name
'rsa_aggregate'
>>> try:
...     recipe_named("nope")
... except KeyError as err:
...     print(err.args[0][:40])
no recipe 'nope'; the recipes: rc, qed-n
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from clients.eval.recipes import (
    adaptive_consistency,
    deepconf,
    esc,
    its_hub,
    qed_nano_rc,
    qed_nano_rsa,
    rc,
    rsa,
    s1,
    self_refine,
)
from clients.eval.recipes.recipe import (
    Evaluation,
    PromptKey,
    Recipe,
    Reported,
    Sampling,
    Served,
)

__all__ = [
    "RECIPES",
    "Evaluation",
    "PromptKey",
    "Recipe",
    "Reported",
    "Sampling",
    "Served",
    "recipe_named",
]

RECIPES: Mapping[str, Recipe] = MappingProxyType(
    {
        recipe.name: recipe
        for recipe in (
            rc.RECIPE,
            qed_nano_rc.RECIPE,
            qed_nano_rsa.RECIPE,
            rsa.RECIPE,
            deepconf.LOW,
            deepconf.HIGH,
            adaptive_consistency.RECIPE,
            esc.RECIPE,
            s1.RECIPE,
            self_refine.RECIPE,
            its_hub.BEAM,
            its_hub.PARTICLE_FILTER,
        )
    }
)
"""Every recipe by name."""


def recipe_named(name: str) -> Recipe:
    """The recipe called ``name``; a KeyError naming the recipes there are."""
    try:
        return RECIPES[name]
    except KeyError:
        raise KeyError(f"no recipe {name!r}; the recipes: {', '.join(RECIPES)}") from None
