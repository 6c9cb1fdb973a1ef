"""The strategy registry: spec names to Strategy classes, and where the classes come from.

The default registry (:func:`default_registry`) serves, in this order:

1. the built-ins, :data:`scaffolds.strategies.BUILTINS` (the one list of them);
2. the scaffolds of other installed distributions: every entry point of the group
   ``ponder.scaffolds`` (:data:`ENTRY_POINT_GROUP`) names a Strategy subclass
   (``critic = my_package.critic:Critic``) or a module whose classes are marked with
   :func:`~scaffolds.strategies.base.register` (``critic = my_package.critic``);
3. any other imported class marked with ``register`` (a strategy defined in the
   program, or in a test).

An entry point that fails to load, or names something that is not a strategy, stops the
registry with a :class:`ScaffoldLoadError` naming the entry point and its distribution:
an installed scaffold that silently went missing would only show up later, as "unknown
strategy" on a request that names it.

>>> registry = Registry()
>>> registry.get("gsr", "solver.name")
Traceback (most recent call last):
scaffolds.errors.SpecError: unknown strategy 'gsr' at solver (known: none)
>>> "gsr" in builtin_registry().names()
True
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from importlib import metadata
from types import ModuleType
from typing import Any, NamedTuple

from scaffolds.errors import ScaffoldLoadError, SpecError
from scaffolds.prompts import PromptSet, common_prompts
from scaffolds.spec_grammar import _LITERALS, _NAME
from scaffolds.strategies.base import Strategy

__all__ = [
    "ENTRY_POINT_GROUP",
    "Registry",
    "StrategyInfo",
    "builtin_registry",
    "default_registry",
    "entry_point_strategies",
    "get_prompt_set",
]

ENTRY_POINT_GROUP = "ponder.scaffolds"
"""The entry-point group through which other distributions add scaffolds."""


class StrategyInfo(NamedTuple):
    """For docs and ``/v1/models``; ``params`` maps each parameter to its default
    (in JSON form; None for a required parameter)."""

    name: str
    summary: str
    params: dict[str, Any]


class Registry:
    """Maps spec names to Strategy classes.

    >>> Registry().names()
    []
    """

    def __init__(self, strategies: Iterable[type[Strategy]] = ()):
        self._classes: dict[str, type[Strategy]] = {}
        for cls in strategies:
            self.register(cls)

    def register(self, cls: type[Strategy]) -> type[Strategy]:
        """Add ``cls`` under ``cls.name``; returns ``cls``, so it also works as a decorator.

        Only the name is checked: templates are optional per prompt set (a set a
        strategy lacks is refused when a run asks for it).
        """
        name = getattr(cls, "name", None)
        if not (isinstance(cls, type) and issubclass(cls, Strategy)):
            raise TypeError(f"{cls!r} is not a Strategy subclass")
        if not isinstance(name, str) or not _NAME.fullmatch(name) or name in _LITERALS:
            raise ValueError(f"{cls.__name__} needs a valid spec name (got {name!r})")
        if self._classes.setdefault(name, cls) is not cls:
            raise ValueError(f"strategy name {name!r} is already taken")
        return cls

    def get(self, name: str, path: str = "name") -> type[Strategy]:
        """The class named ``name``; ``path`` is the dotted path to blame if there is none."""
        if name in self._classes:
            return self._classes[name]
        near = difflib.get_close_matches(name, self._classes, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        where = f" at {path.removesuffix('.name')}" if path != "name" else ""
        known = ", ".join(self.names()) or "none"
        raise SpecError(f"unknown strategy {name!r}{where}{hint} (known: {known})", param=path)

    def names(self) -> list[str]:
        return sorted(self._classes)

    def classes(self) -> list[type[Strategy]]:
        """The registered classes, by name."""
        return [self._classes[name] for name in self.names()]

    def describe(self) -> list[StrategyInfo]:
        out = []
        for cls in self.classes():
            params = dict[str, Any]()
            for key, info in cls.model_fields.items():
                required = info.is_required()
                default = None if required else info.get_default(call_default_factory=True)
                params[key] = default.to_spec() if isinstance(default, Strategy) else default
            summary = cls.summary or (cls.__doc__ or "").strip().partition("\n")[0]
            out.append(StrategyInfo(cls.name, summary, params))
        return out


def builtin_registry() -> Registry:
    """A new registry of the built-ins only (:data:`scaffolds.strategies.BUILTINS`)."""
    from scaffolds.strategies import BUILTINS

    return Registry(BUILTINS)


def default_registry() -> Registry:
    """A new registry of the built-ins, the entry points of :data:`ENTRY_POINT_GROUP`, and
    every imported class marked with :func:`~scaffolds.strategies.base.register`.

    Two different classes under one name are an error naming both, except that a class
    defined again under the same module and name (a reload) replaces the older one.
    """
    from scaffolds.strategies import BUILTINS

    found: dict[str, tuple[type[Strategy], str]] = {}
    sources = [
        *((cls, f"{_where(cls)} (built-in)") for cls in BUILTINS),
        *entry_point_strategies(),
        *((cls, _where(cls)) for cls in _subclasses(Strategy) if _marked(cls)),
    ]
    for cls, source in sources:
        old = found.get(cls.name)
        if old is not None and _where(old[0]) != _where(cls):
            raise ValueError(f"strategy name {cls.name!r} is taken by both {old[1]} and {source}")
        found[cls.name] = (cls, source if old is None or old[0] is not cls else old[1])
    return Registry(cls for cls, _ in found.values())


def entry_point_strategies(
    group: str = ENTRY_POINT_GROUP,
) -> list[tuple[type[Strategy], str]]:
    """(class, where it comes from) for every strategy the installed entry points of
    ``group`` name; raises :class:`ScaffoldLoadError` naming the one that fails.

    >>> entry_point_strategies("ponder.no_such_group")
    []
    """
    out: list[tuple[type[Strategy], str]] = []
    for point in metadata.entry_points(group=group):
        dist = point.dist
        label = f"entry point {point.name!r} = {point.value!r} ({group})"
        label += f" of distribution {dist.name} {dist.version}" if dist is not None else ""
        try:
            loaded = point.load()
        except Exception as err:
            raise ScaffoldLoadError(f"{label} failed to load: {type(err).__name__}: {err}") from err
        if isinstance(loaded, type) and issubclass(loaded, Strategy):
            out.append((loaded, f"{_where(loaded)} ({label})"))
        elif isinstance(loaded, ModuleType):
            marked = [cls for cls in _subclasses(Strategy) if _marked(cls) and _within(cls, loaded)]
            if not marked:
                raise ScaffoldLoadError(
                    f"{label} names module {loaded.__name__!r}, which registers no strategy "
                    "(mark its classes with @register)"
                )
            out += [(cls, f"{_where(cls)} ({label})") for cls in marked]
        else:
            raise ScaffoldLoadError(
                f"{label} names {loaded!r}, which is neither a Strategy subclass nor a module"
            )
    return out


def _marked(cls: type[Strategy]) -> bool:
    return bool(cls.__dict__.get("registered", False))


def _within(cls: type[Strategy], module: ModuleType) -> bool:
    name = module.__name__
    return cls.__module__ == name or cls.__module__.startswith(f"{name}.")


def _subclasses(cls: type[Strategy]) -> list[type[Strategy]]:
    out: list[type[Strategy]] = []
    for sub in cls.__subclasses__():
        out += [sub, *_subclasses(sub)]
    return out


def _where(cls: type[Strategy]) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def get_prompt_set(name: str, registry: Registry | None = None) -> PromptSet:
    """The whole prompt set ``name``: the shared templates and every registered
    strategy's contribution to it (strategies that lack the set add nothing).

    >>> sorted(get_prompt_set("default").template("gsr_refine").fields)
    ['candidates', 'count', 'problem']
    """
    registry = registry if registry is not None else default_registry()
    parts = [part for cls in registry.classes() for part in cls.prompt_sets if part.name == name]
    return common_prompts(name).merged(*parts)
