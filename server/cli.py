"""``ponder serve``: the command line generated from :class:`~server.settings.Settings`.

Every settings field with a flag becomes one option: its name is ``--field-name`` unless
its :class:`~server.pool.model_settings.Flag` metadata says otherwise, its help is the field's
docstring, and the help names its default and its ``PONDER_*`` variable, both read from
the model. An option left out passes nothing, so the environment, then the config file,
then the field's default decide it (pydantic-settings' precedence).

>>> options = {o.field: o for o in setting_options()}
>>> options["graceful_timeout_s"].flag, options["graceful_timeout_s"].env
('--graceful-timeout', 'PONDER_GRACEFUL_TIMEOUT_S')
>>> options["max_concurrent_runs"].help
'Runs executing at once. [default: 16] [env: PONDER_MAX_CONCURRENT_RUNS]'

Example::

    ponder serve --engine http://localhost:8001/v1 --model qwen3-4b \\
        --alias gsr4='gsr(n=4)' --api-key-file keys.txt --port 8000
"""

from __future__ import annotations

import inspect
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from server.pool.model_settings import Flag
from server.settings import ENV_PREFIX, Settings

__all__ = ["SettingOption", "env_name", "serve", "serve_app", "setting_options"]


@dataclass(frozen=True)
class SettingOption:
    """One ``ponder serve`` option, as generated from a settings field."""

    field: str
    flag: str
    off: str | None
    metavar: str | None
    repeat: bool
    kind: type
    help: str

    @property
    def env(self) -> str:
        """The environment variable pydantic-settings reads the field from."""
        return env_name(self.field)

    def parameter(self) -> inspect.Parameter:
        """The keyword parameter typer reads this option from."""
        decls = f"{self.flag}/{self.off}" if self.off else self.flag
        option = typer.Option(decls, metavar=self.metavar, help=self.help, show_default=False)
        kind: Any = list[self.kind] if self.repeat else self.kind  # type: ignore[name-defined]
        return inspect.Parameter(
            self.field,
            inspect.Parameter.KEYWORD_ONLY,
            default=None,
            annotation=Annotated[kind | None, option],
        )


def env_name(field: str) -> str:
    """``PONDER_<FIELD>``: the variable a settings field is read from."""
    return f"{ENV_PREFIX}{field.upper()}"


def _flag(info: FieldInfo) -> Flag:
    return next((m for m in info.metadata if isinstance(m, Flag)), Flag())


def _kind(annotation: Any) -> type:
    """The option's value type: bool, int, float or Path as the field is, else str."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        annotation = next(a for a in args if a is not type(None))
    return annotation if annotation in (bool, int, float, Path) else str


def _default_text(info: FieldInfo) -> str:
    default = info.get_default(call_default_factory=True)
    if default is PydanticUndefined or default in (None, (), {}):
        return ""
    if isinstance(default, float) and default.is_integer():
        default = int(default)
    if isinstance(default, bool):
        default = "yes" if default else "no"
    return f" [default: {default}]"


def setting_options() -> list[SettingOption]:
    """The options of every settings field that has a flag, in the model's order."""
    options = []
    for name, info in Settings.model_fields.items():
        flag = _flag(info)
        if flag.hidden:
            continue
        description = " ".join((info.description or name).split())
        option = SettingOption(
            field=name,
            flag=flag.name or f"--{name.replace('_', '-')}",
            off=flag.off,
            metavar=flag.metavar,
            repeat=flag.repeat,
            kind=_kind(info.annotation),
            help=f"{description}{_default_text(info)} [env: {env_name(name)}]",
        )
        options.append(option)
    return options


def serve(**given: Any) -> None:
    """Serve an OpenAI-compatible API that answers each request with a scaffold run.

    Flags beat PONDER_* environment variables, which beat the --config file.
    """
    from pydantic import ValidationError

    from scaffolds.core.errors import PonderError
    from server.http.app import serve as run_server
    from server.pool.embedded import embedded_default
    from server.settings import setting_errors

    overrides = {k: v for k, v in given.items() if v is not None and v != []}
    try:
        settings = Settings(**overrides)
        embedded = not settings.served_models()
        with embedded_default(
            settings, say=lambda m: typer.echo(f"ponder serve: {m}", err=True)
        ) as settings:
            if embedded:
                for config in settings.served_models():
                    aliases = ", ".join(config.alias_specs())
                    typer.echo(f"ponder serve: {config.name} aliases: {aliases}", err=True)
            run_server(settings)
    except ValidationError as err:
        typer.echo(f"ponder serve: invalid settings:\n{setting_errors(err)}", err=True)
        raise typer.Exit(2) from None
    except RuntimeError as err:  # the embedded engine could not start
        typer.echo(f"ponder serve: {err}", err=True)
        raise typer.Exit(1) from None
    except (PonderError, ValueError) as err:
        param = getattr(err, "param", None)
        where = f"{param}: " if param else ""
        typer.echo(f"ponder serve: {where}{err}", err=True)
        raise typer.Exit(2) from None


def make_serve_app() -> typer.Typer:
    """A typer app whose one command is :func:`serve`, with the generated options."""

    def command(**given: Any) -> None:
        serve(**given)

    params = [option.parameter() for option in setting_options()]
    command.__doc__ = serve.__doc__
    setattr(command, "__signature__", inspect.Signature(params, return_annotation=None))  # noqa: B010
    command.__annotations__ = {p.name: p.annotation for p in params}
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)
    app.command(name="serve")(command)
    return app


serve_app = make_serve_app()
