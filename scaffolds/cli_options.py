"""Command-line options generated from frozen settings classes (as TRL's configs make theirs).

A settings class is a frozen dataclass or a pydantic model. Each of its fields becomes one
option: the field's name is the flag (``--field-name``), its attribute docstring the help,
its type the parsing (``bool``, ``int``, ``float``, ``Path``, else ``str``; a tuple or list
a repeatable option), and its default the default (no default: a required option).
:class:`Flag` metadata (``Annotated[int, Flag(min=1)]``) says what differs from that. A
dataclass field whose type is itself a dataclass is expanded into that class's options
(its default instance gives their defaults; :class:`Nested` adds a prefix or leaves some
out), so one command's settings are composed from shared parts.

:func:`field_options` lists a class's options, :func:`command_function` makes the function
typer registers (its parameters are the options), and :func:`build` makes the settings
object back from what typer parsed. ``ponder serve`` and ``ponder train`` are generated
with them.

>>> @dataclass(frozen=True)
... class Demo:
...     steps: Annotated[int, Flag(min=1, help="optimizer steps")] = 4
...     learning_rate: Annotated[float, Flag("--lr")] = 1e-5
...     cpu: bool = False
>>> [(o.flag, o.off, o.default) for o in field_options(Demo)]
[('--steps', None, 4), ('--lr', None, 1e-05), ('--cpu', '--no-cpu', False)]
>>> build(Demo, {"steps": 8, "cpu": True})
Demo(steps=8, learning_rate=1e-05, cpu=True)
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import textwrap
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import MISSING, dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import typer

__all__ = ["Flag", "Nested", "Option", "build", "command_function", "field_options"]

T = TypeVar("T")
SCALARS = (bool, int, float, Path, str)


@dataclass(frozen=True)
class Flag:
    """How a setting appears on a command line (as field metadata).

    ``name`` replaces the default ``--field-name``; ``metavar`` names the value;
    ``repeat`` makes it repeatable (a list); ``off`` is a boolean's negative form (a
    boolean without ``name`` gets ``--no-field-name``); ``hidden`` keeps it off the
    command line; ``short`` is a one-letter alias; ``envvar`` a variable the option is
    read from when not given; ``min`` the smallest number accepted; ``argument`` makes
    it positional; ``help`` replaces the field's docstring.

    >>> Flag("--graceful-timeout").name
    '--graceful-timeout'
    """

    name: str | None = None
    metavar: str | None = None
    repeat: bool = False
    off: str | None = None
    hidden: bool = False
    short: str | None = None
    envvar: str | None = None
    min: int | float | None = None
    argument: bool = False
    help: str | None = None


@dataclass(frozen=True)
class Nested:
    """A field holding a settings dataclass: its options get ``prefix`` (on the flag and
    the parameter name), and the fields in ``exclude`` stay off the command line.

    >>> Nested(prefix="lora_").prefix
    'lora_'
    """

    prefix: str = ""
    exclude: tuple[str, ...] = ()


@dataclass(frozen=True)
class Option:
    """One generated option: where its value goes and how typer reads it."""

    field: str
    """The parameter's name (a nested field's name with its prefix)."""
    path: tuple[str, ...]
    """Field names from the settings class down to this field."""
    flag: str
    kind: type
    """What the value is parsed as (each item's, for a repeatable option)."""
    default: Any = MISSING
    """MISSING: required."""
    help: str | None = None
    off: str | None = None
    short: str | None = None
    metavar: str | None = None
    repeat: bool = False
    envvar: str | None = None
    min: int | float | None = None
    argument: bool = False
    show_default: bool = True

    def parameter(self) -> inspect.Parameter:
        """The keyword parameter typer reads this option from."""
        kind: Any = list[self.kind] if self.repeat else self.kind  # type: ignore[name-defined]
        if self.default is None:
            kind = kind | None
        info: Any
        if self.argument:
            info = typer.Argument(
                help=self.help, metavar=self.metavar, show_default=self.show_default
            )
        else:
            decls = [f"{self.flag}/{self.off}" if self.off else self.flag]
            info = typer.Option(
                *decls,
                *([self.short] if self.short else []),
                help=self.help,
                metavar=self.metavar,
                show_default=self.show_default,
                envvar=self.envvar,
                min=self.min,
            )
        default = inspect.Parameter.empty if self.default is MISSING else self.default
        return inspect.Parameter(
            self.field,
            inspect.Parameter.KEYWORD_ONLY,
            default=default,
            annotation=Annotated[kind, info],
        )


@dataclass(frozen=True)
class _Field:
    name: str
    annotation: Any
    metadata: tuple[Any, ...]
    default: Any
    doc: str | None


def _unwrap(annotation: Any) -> tuple[Any, tuple[Any, ...]]:
    """The type inside ``Annotated`` and ``X | None``, and the ``Annotated`` metadata."""
    metadata: tuple[Any, ...] = ()
    if typing.get_origin(annotation) is Annotated:
        annotation, *extra = typing.get_args(annotation)
        metadata = tuple(extra)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            inner, more = _unwrap(args[0])
            return inner, (*metadata, *more)
    return annotation, metadata


def _kind(annotation: Any) -> type:
    """The option's value type: bool, int, float, Path or str as the field (or each item
    of a tuple or list field) is, else str (a Literal, a secret, a dict)."""
    annotation, _ = _unwrap(annotation)
    if typing.get_origin(annotation) in (list, tuple):
        annotation, _ = _unwrap(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) is Literal:
        return str
    return annotation if annotation in SCALARS else str


def attribute_docs(cls: type) -> dict[str, str]:
    """The docstrings under a class's fields (and its bases'), read from its source."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__[:-1]):
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, after in itertools.pairwise(body):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


def _fields(cls: type) -> Iterator[_Field]:
    """A dataclass's or pydantic model's fields, with their metadata and docstrings."""
    model_fields = getattr(cls, "model_fields", None)
    if isinstance(model_fields, Mapping):  # pydantic: FieldInfo holds it all
        for name, info in model_fields.items():
            default = info.get_default(call_default_factory=True)
            default = MISSING if info.is_required() else default
            yield _Field(name, info.annotation, tuple(info.metadata), default, info.description)
        return
    hints = typing.get_type_hints(cls, include_extras=True)
    docs = attribute_docs(cls)
    for item in dataclasses.fields(cls):
        annotation, metadata = _unwrap(hints[item.name])
        default = _default(item)
        yield _Field(item.name, annotation, metadata, default, docs.get(item.name))


def _default(item: dataclasses.Field[Any]) -> Any:
    """A dataclass field's default, made by its factory if it has one (else MISSING)."""
    if item.default_factory is not MISSING:
        return item.default_factory()
    return item.default


def _meta(metadata: Sequence[Any], kind: type[T], fallback: T) -> T:
    return next((m for m in metadata if isinstance(m, kind)), fallback)


def field_options(
    cls: type, *, prefix: str = "", exclude: Sequence[str] = (), defaults: Any = None
) -> list[Option]:
    """The options of ``cls``'s fields in their order, nested dataclasses expanded; fields
    that are hidden or in ``exclude`` have none. ``defaults``: an instance whose values
    are the defaults (a nested field's default instance)."""
    options: list[Option] = []
    for field in _fields(cls):
        flag = _meta(field.metadata, Flag, Flag())
        if flag.hidden or field.name in exclude:
            continue
        default = field.default if defaults is None else getattr(defaults, field.name)
        if isinstance(field.annotation, type) and dataclasses.is_dataclass(field.annotation):
            nested = _meta(field.metadata, Nested, Nested())
            inner = field_options(
                field.annotation,
                prefix=prefix + nested.prefix,
                exclude=nested.exclude,
                defaults=None if default is MISSING else default,
            )
            options += [dataclasses.replace(o, path=(field.name, *o.path)) for o in inner]
            continue
        name = prefix + field.name
        kind = _kind(field.annotation)
        auto_off = kind is bool and flag.name is None and not flag.argument
        options.append(
            Option(
                field=name,
                path=(field.name,),
                flag=flag.name or f"--{name.replace('_', '-')}",
                kind=kind,
                default=default,
                help=flag.help or (" ".join(field.doc.split()) if field.doc else None),
                off=flag.off or (f"--no-{name.replace('_', '-')}" if auto_off else None),
                short=flag.short,
                metavar=flag.metavar,
                repeat=flag.repeat,
                envvar=flag.envvar,
                min=flag.min,
                argument=flag.argument,
            )
        )
    _check_unique(options)
    return options


def _check_unique(options: Sequence[Option]) -> None:
    names = [o.field for o in options]
    flags = [f for o in options for f in (o.flag, o.off, o.short) if f and not o.argument]
    for seen in (names, flags):
        repeated = sorted({n for n in seen if seen.count(n) > 1})
        if repeated:
            raise ValueError(f"settings options: {repeated[0]!r} is generated twice")


def command_function(
    options: Sequence[Option], call: Callable[[dict[str, Any]], None], doc: str | None
) -> Callable[..., None]:
    """A function for ``typer.Typer.command``: its parameters are ``options``, and it
    hands ``call`` the values typer parsed, by option name."""

    def command(**given: Any) -> None:
        call(given)

    params = [option.parameter() for option in options]
    command.__doc__ = doc
    setattr(command, "__signature__", inspect.Signature(params, return_annotation=None))  # noqa: B010
    command.__annotations__ = {p.name: p.annotation for p in params}
    return command


def build(cls: type[T], values: Mapping[str, Any], options: Sequence[Option] = ()) -> T:
    """``cls`` (a dataclass) from option values by name; a field with no value keeps its
    default (a nested field: its default instance's values). A list becomes a tuple where
    the field is a tuple."""
    tree: dict[str, Any] = {}
    for option in options or field_options(cls):
        if option.field in values:
            node = tree
            for part in option.path[:-1]:
                node = node.setdefault(part, {})
            node[option.path[-1]] = values[option.field]
    return _make(cls, tree, None)


def _make(cls: type[T], tree: Mapping[str, Any], base: Any) -> T:
    hints = typing.get_type_hints(cls, include_extras=True)
    given: dict[str, Any] = {}
    for item in dataclasses.fields(cls):  # type: ignore[arg-type]
        if item.name not in tree:
            continue
        annotation, _ = _unwrap(hints[item.name])
        value = tree[item.name]
        if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
            inner = _default(item) if base is None else getattr(base, item.name)
            value = _make(annotation, value, None if inner is MISSING else inner)
        elif isinstance(value, list) and typing.get_origin(annotation) is tuple:
            value = tuple(value)
        given[item.name] = value
    if base is not None:
        return typing.cast(T, dataclasses.replace(base, **given))
    return cls(**given)
