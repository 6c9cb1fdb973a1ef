"""The ``ponder`` command: ``serve``, ``keys``, ``eval``, ``train`` and ``models``.

This module is small on purpose: each subcommand's app is imported only when that
subcommand runs (or its help is asked for), so ``ponder --help`` imports neither the
server nor training, and ``ponder eval`` not the server. ``ponder --help`` lists the
subcommands from :data:`SUBCOMMANDS` without loading them. A new subcommand is one entry
there: its name, ``module:attribute`` of its typer app, and a one-line summary.

>>> sorted(SUBCOMMANDS)
['calibrate', 'eval', 'keys', 'models', 'serve', 'train']

Example::

    ponder serve --engine http://localhost:8001/v1 --model qwen3-4b --port 8000
    ponder eval --base-url http://127.0.0.1:8000/v1 --model m --dataset d.jsonl --out runs/d
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import typer
from typer.core import TyperGroup


@dataclass(frozen=True)
class Subcommand:
    """Where a subcommand's typer app lives, what ``ponder --help`` says of it, and the
    extra of ``pyproject.toml`` its module needs to import (None: the core's)."""

    target: str
    summary: str
    extra: str | None = None

    def load(self, name: str) -> Any:
        """Import the app and turn it into its click command, named ``name``."""
        if self.extra is not None:
            from scaffolds.dependencies import require

            require(self.extra, f"ponder {name}")
        module, _, attribute = self.target.partition(":")
        command = typer.main.get_command(getattr(importlib.import_module(module), attribute))
        command.name = name
        return command


SUBCOMMANDS: Mapping[str, Subcommand] = MappingProxyType(
    {
        "serve": Subcommand(
            "server.cli:serve_app",
            "Serve an OpenAI-compatible API that answers each request with a scaffold run.",
            extra="server",
        ),
        "keys": Subcommand(
            "server.cli:keys_app",
            "Client keys for 'ponder serve --keys-file': add (prints the key once), list, revoke.",
            extra="server",
        ),
        "eval": Subcommand(
            "clients.eval.cli:eval_app",
            "Evaluate scaffolds on a dataset: run, grade, report accuracy against compute.",
        ),
        "train": Subcommand(
            "training.cli:train_app",
            "Train models to use scaffolds: trace datasets, SFT, GRPO with scaffold rollouts.",
        ),
        "calibrate": Subcommand(
            "clients.calibrate:calibrate_app",
            "Measure specs on your problems; write the effort policy and auto's thresholds.",
        ),
        "models": Subcommand(
            "clients.models_cli:models_app",
            "Models Ponder ships or prepares from a package: list, prepare, path.",
        ),
    }
)


PIPED_HELP_WIDTH = 1000
"""The width of ``--help`` when stdout is not a terminal: no line is wrapped."""


class LazyGroup(TyperGroup):
    """A typer group that imports a subcommand from :data:`SUBCOMMANDS` on first use.

    It is the top of every ``ponder`` command: a missing optional dependency
    (:class:`~scaffolds.errors.MissingDependencyError`, wherever it is raised) ends
    the command here with its one line, naming the install command, and exit status 2.
    """

    def main(self, *args: Any, **extra: Any) -> Any:
        """Run the command line; piped, ``--help`` is laid out unwrapped (click would
        squeeze it into 80 columns), on a terminal at the window's full width."""
        import shutil
        import sys

        width = shutil.get_terminal_size().columns if sys.stdout.isatty() else PIPED_HELP_WIDTH
        extra.setdefault("terminal_width", width)
        extra.setdefault("max_content_width", width)
        return super().main(*args, **extra)

    def invoke(self, ctx: Any) -> Any:
        from scaffolds.errors import MissingDependencyError

        try:
            return super().invoke(ctx)
        except MissingDependencyError as err:
            typer.echo(f"error: {err}", err=True)
            raise typer.Exit(2) from None

    def list_commands(self, ctx: Any) -> list[str]:
        return list(dict.fromkeys([*SUBCOMMANDS, *super().list_commands(ctx)]))

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.commands and cmd_name in SUBCOMMANDS:
            self.commands[cmd_name] = SUBCOMMANDS[cmd_name].load(cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The command list, with the summaries of commands not loaded yet."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.commands.get(name)
            if command is None:
                rows.append((name, SUBCOMMANDS[name].summary))
            elif not command.hidden:
                rows.append((name, command.get_short_help_str(formatter.width - 6 - len(name))))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


app = typer.Typer(
    name="ponder",
    cls=LazyGroup,
    help="Ponder: an OpenAI-compatible server that answers with reasoning scaffolds.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def main() -> None:
    """Ponder: an OpenAI-compatible server that answers with reasoning scaffolds."""


if __name__ == "__main__":
    app()
