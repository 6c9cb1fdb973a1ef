"""``ponder models``: the models Ponder can serve without a download, and preparing them.

    ponder models list                            # each known model, and whether it is ready
    ponder models prepare smollm2-135m-instruct   # convert it once (run again: nothing to do)
    ponder models path smollm2-135m-instruct      # the folder of a prepared model

Prepared models live under ``$PONDER_HOME/models`` (default ``~/.cache/ponder/models``).
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from scaffolds.errors import PonderError

__all__ = ["models_app"]

models_app = typer.Typer(
    help="Models Ponder ships or prepares from a package: list, prepare, path.",
    no_args_is_help=True,
    add_completion=False,
)
err = Console(stderr=True)


def _fail(error: PonderError) -> typer.Exit:
    err.print(f"[red]error:[/red] {error.message}")
    return typer.Exit(1)


@models_app.command("list")
def list_models() -> None:
    """Each known model, its prompt set, and whether it is ready to serve."""
    from scaffolds.models import known_models, model_status

    table = Table("model", "prompts", "ready", "where / what to do")
    for model in known_models():
        status = model_status(model.name)
        where = str(status.path) if status.ready else status.detail
        table.add_row(model.name, model.prompts, "yes" if status.ready else "no", where)
    Console().print(table)


@models_app.command()
def prepare(name: Annotated[str, typer.Argument(help="a model from `ponder models list`")]) -> None:
    """Prepare NAME once (check its source file, convert it); print its folder."""
    from scaffolds.models import model_status
    from scaffolds.models.prepare import prepare_model

    try:
        if model_status(name).ready:
            err.print(f"{name} is already prepared")
        with err.status(f"preparing {name}") as spinner:

            def say(step: str) -> None:
                spinner.update(f"{name}: {step}")
                err.log(step)

            path = prepare_model(name, say)
    except PonderError as exc:
        raise _fail(exc) from None
    print(path)


@models_app.command()
def path(name: Annotated[str, typer.Argument(help="a prepared model")]) -> None:
    """Print the folder of a ready model (fails, saying what to run, when it is not)."""
    from scaffolds.models import model_path

    try:
        print(model_path(name))
    except PonderError as exc:
        raise _fail(exc) from None
