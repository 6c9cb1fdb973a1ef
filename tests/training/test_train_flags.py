"""``ponder train``'s flags are pinned: every subcommand's names, short aliases, defaults,
environment variables, types, ranges and help, read from the click command objects.

The options are generated from settings dataclasses (:mod:`training.cli`); this test
shows that generating them changed no flag users or docs rely on. After a deliberate
change, rewrite the fixture with ``python -m tests.training.test_train_flags``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

from training.cli import train_app

FIXTURE = Path(__file__).parent / "fixtures" / "train_flags.json"


def _type_name(param: Any) -> str:
    annotation = param.type_descriptor.annotation
    return getattr(annotation, "__name__", None) or str(annotation)


def describe_param(param: Any) -> dict[str, Any]:
    """What a user sees of one parameter (not its Python name, which is internal)."""
    return {
        "kind": type(param).__name__.removeprefix("Typer").lower(),
        "opts": list(param.opts),
        "secondary_opts": list(param.secondary_opts),
        "type": _type_name(param),
        "required": param.required,
        "default": repr(param.default),
        "envvar": param.envvar,
        "multiple": param.multiple,
        "is_flag": getattr(param, "is_flag", False),
        "min": param.min,
        "max": param.max,
        "hidden": getattr(param, "hidden", False),
        "help": " ".join(param.help.split()) if getattr(param, "help", None) else None,
    }


def describe() -> dict[str, Any]:
    """Every subcommand's help and its parameters, keyed by their first flag or name."""
    group = typer.main.get_command(train_app)
    commands: dict[str, Any] = {}
    for name, command in sorted(group.commands.items()):  # type: ignore[attr-defined]
        params = {(p.opts[0] if p.opts else p.name): describe_param(p) for p in command.params}
        commands[name] = {"help": " ".join((command.help or "").split()), "params": params}
    return commands


def test_every_subcommand_keeps_its_flags() -> None:
    expected = json.loads(FIXTURE.read_text())
    actual = describe()
    assert sorted(actual) == sorted(expected)
    for name, command in expected.items():
        assert sorted(actual[name]["params"]) == sorted(command["params"]), name
        for flag, pinned in command["params"].items():
            assert actual[name]["params"][flag] == pinned, (name, flag)
        assert actual[name]["help"] == command["help"], name


def test_every_subcommand_parses_its_help() -> None:
    for name in describe():
        result = CliRunner().invoke(train_app, [name, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output


if __name__ == "__main__":
    FIXTURE.write_text(json.dumps(describe(), indent=1, sort_keys=True) + "\n")
    sys.stdout.write(f"wrote {FIXTURE}\n")
