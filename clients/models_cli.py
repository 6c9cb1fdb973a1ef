"""``ponder models``: the models Ponder can serve without a download, and preparing them.

    ponder models list                            # each known model, and whether it is ready
    ponder models prepare smollm2-135m-instruct   # convert it once (run again: nothing to do)
    ponder models path smollm2-135m-instruct      # the folder of a prepared model
    ponder models prepare smollm2-gsr --adapter runs/gsr/sft/final   # base + LoRA, merged

An adapter (``ponder train sft --lora``'s ``final/``) is registered under NAME on its base
(``--base``, else the base it was trained from when that is a known model), merged into
a folder of its own, and served by ``ponder serve``'s embedded default beside its base.

Prepared models live under ``$PONDER_HOME/models`` (default ``~/.cache/ponder/models``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from scaffolds.errors import MissingDependencyError, PonderError
from scaffolds.terminal import console

__all__ = ["models_app"]

models_app = typer.Typer(
    help="Models Ponder ships or prepares from a package: list, prepare, path.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)
err = console(stderr=True)


def _fail(error: PonderError) -> typer.Exit:
    err.print(f"[red]error:[/red] {escape(error.message)}")
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
    console().print(table)


def _base_of(adapter: Path, base: str | None) -> str:
    """``--base``, else the known model the adapter was trained from (peft records the
    folder it loaded: ``.../models/smollm2-135m-instruct``)."""
    from scaffolds.models import get_model
    from scaffolds.models.known import ModelPreparationError

    if base is not None:
        return base
    try:
        config = json.loads((adapter / "adapter_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelPreparationError(f"{adapter}: {exc}", param="adapter") from None
    trained_from = Path(str(config.get("base_model_name_or_path") or "")).name
    try:
        return get_model(trained_from).name
    except PonderError:
        raise ModelPreparationError(
            f"{adapter} was trained from {trained_from!r}, not a known model: pass --base",
            param="base",
        ) from None


def _register(
    name: str, adapter: Path, base: str | None, prompts: str | None, replace: bool
) -> None:
    from scaffolds.models import adapters_home, get_model, known_models
    from scaffolds.models.adapters import register_adapter
    from scaffolds.models.known import ModelPreparationError

    base_model = get_model(_base_of(adapter, base))
    registered = (adapters_home() / name).is_dir()  # registering it again is a no-op
    if not registered and name in {m.name for m in known_models()}:
        raise ModelPreparationError(f"{name!r} is a known model already", param="name")
    folder = register_adapter(
        adapter, name, base_model, adapters_home(), prompts=prompts, replace=replace
    )
    err.log(f"adapter {name!r} on {base_model.name} registered in {folder}")


@models_app.command()
def prepare(
    name: Annotated[str, typer.Argument(help="a model from `ponder models list`")],
    adapter: Annotated[
        Path | None, typer.Option(help="a LoRA adapter folder: register it as NAME first")
    ] = None,
    base: Annotated[str | None, typer.Option(help="the adapter's base model")] = None,
    prompts: Annotated[str | None, typer.Option(help="prompt set [the base's]")] = None,
    replace: Annotated[
        bool, typer.Option(help="replace the adapter registered as NAME (merged again)")
    ] = False,
) -> None:
    """Prepare NAME once (check its source file, convert it, or merge its adapter);
    print its folder."""
    from scaffolds.models import model_status
    from scaffolds.models.prepare import prepare_model, require_modules

    try:
        if adapter is not None:
            _register(name, adapter, base, prompts, replace)
        if model_status(name).ready:
            err.print(f"{name} is already prepared")
        require_modules(name)
        with err.status(f"preparing {name}") as spinner:

            def say(step: str) -> None:
                spinner.update(f"{name}: {step}")
                err.log(step)

            path = prepare_model(name, say)
    except MissingDependencyError:
        raise  # ponder's top says it in one line, exit 2
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
