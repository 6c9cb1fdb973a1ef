"""Serving a recipe: its prompt file checked, then ``ponder serve`` started in front of the
user's engine as an owned child (a process group of its own, stopped as a group when the
evaluation ends, dead when ``ponder eval`` dies: :mod:`scaffolds.processes`).

The child is the installed ``ponder`` itself (``python -m clients.cli serve``), so
``clients`` never imports the server; it listens on a free loopback port and says which
on its log (``serve.log`` in the output folder), and the run waits for its ``/ready``.
The spec is also its alias ``MODEL+NAME``, so the server checks the prompt file against
it when it starts.

>>> from clients.eval.recipes import recipe_named
>>> command = serve_command(
...     recipe_named("s1"), engine="http://gpu:8001/v1", model="s1.1-32b", prompt_file=None
... )
>>> command[3:11]
['serve', '--host', '127.0.0.1', '--port', '0', '--engine', 'http://gpu:8001/v1', '--model']
>>> command[12], command[13].startswith('s1=budget_forcing(mode="ignore", waits=1')
('--alias', True)
>>> command[-5:]  # the recipe's serve flags
['--thinking', '--thinking-start', '<|im_start|>think', '--thinking-end', '<|im_start|>answer']
>>> try:
...     check_prompt_file(recipe_named("rsa"), None)
... except RecipeError as err:
...     print(str(err)[:77])
--recipe rsa needs --prompt-file: a YAML or TOML file that sets rsa_aggregate
"""

from __future__ import annotations

import contextlib
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from clients.eval.recipes.recipe import Recipe
from scaffolds.errors import PromptFileError
from scaffolds.processes.children import owned_process
from scaffolds.prompts.files import load_prompt_file

__all__ = [
    "START_TIMEOUT_S",
    "RecipeError",
    "check_prompt_file",
    "engine_model",
    "serve_command",
    "serving",
]

START_TIMEOUT_S = 600.0
"""Seconds ``ponder serve`` may take to answer ``/ready`` (it fronts a running engine)."""

_BOUND = re.compile(r"ponder serve: (http://\S+/v1) is bound")


class RecipeError(ValueError):
    """A recipe cannot run as asked: one line that says what to give."""


def check_prompt_file(recipe: Recipe, path: Path | None) -> None:
    """Every prompt key the recipe needs is set in the file at ``path`` (as a template or
    a text); a missing file or key is a :class:`RecipeError` naming the key and where the
    reference keeps its wording."""
    keys = recipe.served.prompt_keys
    if not keys:
        return
    if path is None:
        wanted = ", ".join(f"{k.name} (the reference's wording: {k.source})" for k in keys)
        raise RecipeError(
            f"--recipe {recipe.name} needs --prompt-file: a YAML or TOML file that sets {wanted}"
        )
    try:
        loaded = load_prompt_file(path)
    except PromptFileError as err:
        raise RecipeError(str(err)) from None
    for key in keys:
        if key.name not in loaded.templates and key.name not in loaded.texts:
            raise RecipeError(
                f"prompt file {path} does not set {key.name}, which --recipe {recipe.name} "
                f"needs: copy the reference's wording from {key.source}"
            )


def serve_command(
    recipe: Recipe,
    *,
    engine: str,
    model: str,
    prompt_file: Path | None,
    reward_url: str | None = None,
    host: str = "127.0.0.1",
) -> list[str]:
    """The ``ponder serve`` command line that serves ``recipe``'s settings in front of
    ``engine`` (on a free port of ``host``)."""
    command = [sys.executable, "-m", "clients.cli", "serve", "--host", host, "--port", "0"]
    command += [
        "--engine",
        engine,
        "--model",
        model,
        "--alias",
        f"{recipe.name}={recipe.served.spec}",
    ]
    if prompt_file is not None:
        command += ["--prompt-file", str(prompt_file)]
    if reward_url is not None:
        command += ["--reward-url", reward_url]
    if recipe.served.timeout_s is not None:
        command += ["--max-budget-timeout", str(recipe.served.timeout_s)]
    return [*command, *recipe.served.serve_flags]


def engine_model(engine: str, timeout_s: float = 30.0) -> str:
    """The first model the engine lists in ``/v1/models`` (what ``--model`` defaults to)."""
    try:
        answer = httpx.get(f"{engine.rstrip('/')}/models", timeout=timeout_s)
        answer.raise_for_status()
        return str(answer.json()["data"][0]["id"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as err:
        raise RecipeError(
            f"cannot ask {engine}/models which model it serves ({err}); give --model"
        ) from None


def _tail(log: Path, lines: int = 20) -> str:
    text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
    return "\n".join(text.splitlines()[-lines:])


@contextlib.contextmanager
def serving(
    command: list[str], log: Path, *, start_timeout_s: float = START_TIMEOUT_S
) -> Iterator[str]:
    """Run ``command`` (a ``ponder serve``) for the block, its output in ``log``; yield its
    base URL (``http://host:port/v1``) once it answers ``/ready``. It stops, as a group,
    however the block ends. A server that exits or never gets ready is a
    :class:`RecipeError` with the end of its log."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out, owned_process(command, stdout=out, stderr=out) as child:
        deadline = time.monotonic() + start_timeout_s
        url: str | None = None
        while True:
            if child.poll() is not None:
                raise RecipeError(
                    f"ponder serve exited ({child.returncode}) before it was ready; "
                    f"the end of {log}:\n{_tail(log)}"
                )
            if time.monotonic() > deadline:
                raise RecipeError(
                    f"ponder serve was not ready in {start_timeout_s:.0f} s; the end of "
                    f"{log}:\n{_tail(log)}"
                )
            if url is None:
                found = _BOUND.search(log.read_text(encoding="utf-8", errors="replace"))
                url = found.group(1) if found else None
            if url is not None and _ready(url):
                break
            time.sleep(0.1)
        yield url


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url.removesuffix('/v1')}/ready", timeout=5.0).status_code == 200
    except httpx.HTTPError:
        return False
