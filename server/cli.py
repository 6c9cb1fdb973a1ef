"""``ponder serve``: the command line generated from :class:`~server.settings.Settings`;
and ``ponder keys``, which edits the keys file it reads (:func:`make_keys_app`).

Every settings field with a flag becomes one option (:mod:`scaffolds.cli_options`, which
generates ``ponder train``'s too): its name is ``--field-name`` unless its
:class:`~scaffolds.cli_options.Flag` metadata says otherwise, its help is the field's
docstring, and the help names its default and its ``PONDER_*`` variable, both read from
the model. An option left out passes nothing, so the environment, then the config file,
then the field's default decide it (pydantic-settings' precedence).

>>> options = {o.field: o for o in setting_options()}
>>> options["graceful_timeout_s"].flag, options["graceful_timeout_s"].env
('--graceful-timeout', 'PONDER_GRACEFUL_TIMEOUT_S')
>>> options["queue_size"].help
'Requests that may wait for a run; more get 429. [default: 4096] [env: PONDER_QUEUE_SIZE]'

Example::

    ponder serve --engine http://localhost:8001/v1 --model qwen3-4b \\
        --alias gsr4='gsr(n=4)' --api-key-file keys.txt --port 8000
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from scaffolds.cli_options import Option, command_function, field_options
from server.settings import ENV_PREFIX, Settings

__all__ = ["SettingOption", "env_name", "serve", "serve_app", "setting_options"]


@dataclass(frozen=True)
class SettingOption(Option):
    """One ``ponder serve`` option: no default of its own (pydantic-settings decides),
    and a help that names the field's default and variable."""

    @property
    def env(self) -> str:
        """The environment variable pydantic-settings reads the field from."""
        return env_name(self.field)


def env_name(field: str) -> str:
    """``PONDER_<FIELD>``: the variable a settings field is read from."""
    return f"{ENV_PREFIX}{field.upper()}"


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
    for option in field_options(Settings):
        info = Settings.model_fields[option.field]
        described = (
            f"{option.help or option.field}{_default_text(info)} [env: {env_name(option.field)}]"
        )
        generated = {f.name: getattr(option, f.name) for f in fields(option)}
        generated.update(default=None, show_default=False, help=described)
        options.append(SettingOption(**generated))
    return options


def serve(**given: Any) -> None:
    """Serve an OpenAI-compatible API that answers each request with a scaffold run.

    Flags beat PONDER_* environment variables, which beat the --config file.
    """
    from pydantic import ValidationError

    from scaffolds.errors import PonderError
    from server.app.app import serve as run_server
    from server.app.listener import bind_listener, listener_url
    from server.pool.embedded import embedded_default
    from server.settings import setting_errors

    overrides = {k: v for k, v in given.items() if v is not None and v != []}

    def say(message: str) -> None:
        typer.echo(f"ponder serve: {message}", err=True)

    try:
        settings = Settings(**overrides)
        embedded = not settings.served_models()
        # The port first: taken, it fails now; held, no engine started below can take it.
        sock = bind_listener(settings.host, settings.port)
        say(f"{listener_url(sock)}/v1 is bound; it answers once up")
        with sock, embedded_default(settings, say=say) as settings:
            if embedded:
                for config in settings.served_models():
                    aliases = ", ".join(config.alias_specs())
                    say(f"{config.name} aliases: {aliases}")
            run_server(settings, sock)
    except ValidationError as err:
        say(f"invalid settings:\n{setting_errors(err)}")
        raise typer.Exit(2) from None
    except RuntimeError as err:  # the embedded engine could not start
        say(str(err))
        raise typer.Exit(1) from None
    except (PonderError, ValueError) as err:
        param = getattr(err, "param", None)
        where = f"{param}: " if param else ""
        say(f"{where}{err}")
        raise typer.Exit(2) from None


def make_serve_app() -> typer.Typer:
    """A typer app whose one command is :func:`serve`, with the generated options."""
    command = command_function(setting_options(), lambda given: serve(**given), serve.__doc__)
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)
    app.command(name="serve")(command)
    return app


serve_app = make_serve_app()


# -- ponder keys ---------------------------------------------------------------------------

KeysFile = Annotated[
    Path,
    typer.Option(
        "--file",
        metavar="FILE",
        envvar=f"{ENV_PREFIX}KEYS_FILE",
        help="The keys file (YAML) that 'ponder serve --keys-file' reads.",
    ),
]


def _say_keys(message: str) -> None:
    typer.echo(f"ponder keys: {message}", err=True)


def _entries(file: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    from server.keys import read_keys_document

    try:
        document = read_keys_document(file)
    except (OSError, ValueError) as err:
        _say_keys(str(err))
        raise typer.Exit(2) from None
    return document, document["keys"]


def _write(file: Path, document: dict[str, Any]) -> None:
    from server.keys import key_entries_of, write_keys_document

    try:
        key_entries_of(document, f"keys file {str(file)!r}")  # never write a file serve refuses
        write_keys_document(file, document)
    except (OSError, ValueError) as err:
        _say_keys(str(err))
        raise typer.Exit(2) from None


def keys_add(
    name: Annotated[str, typer.Argument(help="The key's name (logs and metrics show it).")],
    file: KeysFile,
    tenant: Annotated[
        str | None,
        typer.Option(
            help="Who owns what the key stores (keys of a tenant share it) [default: NAME]."
        ),
    ] = None,
    max_concurrent_runs: Annotated[int | None, typer.Option(min=1)] = None,
    requests_per_minute: Annotated[int | None, typer.Option(min=1)] = None,
    tokens_per_minute: Annotated[int | None, typer.Option(min=1)] = None,
    tokens_per_day: Annotated[int | None, typer.Option(min=1)] = None,
    model: Annotated[
        list[str] | None, typer.Option(help="A model the key may use (repeat) [default: all].")
    ] = None,
    scaffold: Annotated[
        list[str] | None, typer.Option(help="A scaffold the key may use (repeat) [default: all].")
    ] = None,
    max_fanout: Annotated[int | None, typer.Option(min=1)] = None,
) -> None:
    """Add a key: prints the new key once (the file keeps only its SHA-256)."""
    from server.keys import hash_key, new_key

    document, entries = _entries(file)
    if any(entry.get("name") == name for entry in entries):
        _say_keys(f"a key named {name!r} is in {str(file)!r} already (revoke it first)")
        raise typer.Exit(2)
    limits = {
        "max_concurrent_runs": max_concurrent_runs,
        "requests_per_minute": requests_per_minute,
        "tokens_per_minute": tokens_per_minute,
        "tokens_per_day": tokens_per_day,
        "models": model or None,
        "scaffolds": scaffold or None,
        "max_fanout": max_fanout,
    }
    key = new_key()
    entry: dict[str, Any] = {"name": name, "tenant": tenant or name, "key_sha256": hash_key(key)}
    given = {k: v for k, v in limits.items() if v is not None}
    if given:
        entry["limits"] = given
    entries.append(entry)
    _write(file, document)
    _say_keys(f"added {name!r} (tenant {entry['tenant']!r}) to {str(file)!r}; its key, shown once:")
    typer.echo(key)


def keys_list(file: KeysFile) -> None:
    """List the keys: name, tenant, limits (never a key or its hash)."""
    _, entries = _entries(file)
    for entry in entries:
        limits = entry.get("limits") or {}
        shown = " ".join(f"{k}={v}" for k, v in limits.items()) or "no limits"
        typer.echo(f"{entry.get('name')}\ttenant={entry.get('tenant', entry.get('name'))}\t{shown}")


def keys_revoke(
    name: Annotated[str, typer.Argument(help="The key's name.")], file: KeysFile
) -> None:
    """Revoke a key: removes it from the file (a running server drops it on SIGHUP)."""
    document, entries = _entries(file)
    kept = [entry for entry in entries if entry.get("name") != name]
    if len(kept) == len(entries):
        _say_keys(f"no key named {name!r} in {str(file)!r}")
        raise typer.Exit(2)
    document["keys"] = kept
    _write(file, document)
    _say_keys(f"revoked {name!r}; send the server SIGHUP (kill -HUP) to drop it now")


def make_keys_app() -> typer.Typer:
    """``ponder keys add|list|revoke``: edit the keys file ``ponder serve`` reads."""
    app = typer.Typer(
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        no_args_is_help=True,
        help="Add, list and revoke client keys in a keys file.",
    )
    app.command(name="add")(keys_add)
    app.command(name="list")(keys_list)
    app.command(name="revoke")(keys_revoke)
    return app


keys_app = make_keys_app()
