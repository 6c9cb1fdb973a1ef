"""Options generated from settings classes: nesting, prefixes, repeats, required fields."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import pytest
import typer
from pydantic import BaseModel, ConfigDict
from typer.testing import CliRunner

from scaffolds.cli_options import Flag, Nested, build, command_function, field_options


@dataclass(frozen=True)
class Part:
    rank: Annotated[int, Flag(min=1)] = 4
    """adapter rank"""
    secret: Annotated[str, Flag(hidden=True)] = "x"


@dataclass(frozen=True)
class Command:
    data: Path
    """input rows"""
    part: Annotated[Part, Nested(prefix="lora_")] = field(default_factory=lambda: Part(rank=8))
    tags: Annotated[tuple[str, ...] | None, Flag("--tag", repeat=True)] = None
    resume: Annotated[bool, Flag("--resume", off="--restart")] = True


def test_fields_become_options_with_docstrings_prefixes_and_defaults() -> None:
    options = {o.field: o for o in field_options(Command)}
    assert list(options) == ["data", "lora_rank", "tags", "resume"]
    assert options["data"].help == "input rows" and options["data"].default is not None
    assert (options["lora_rank"].flag, options["lora_rank"].default) == ("--lora-rank", 8)
    assert options["lora_rank"].path == ("part", "rank")
    assert options["resume"].off == "--restart"


def test_typer_parses_them_back_into_the_settings() -> None:
    seen: list[Command] = []
    options = field_options(Command)
    app = typer.Typer()
    app.command()(command_function(options, lambda v: seen.append(build(Command, v)), "Run."))
    result = CliRunner().invoke(
        app, ["--data", "d.jsonl", "--lora-rank", "2", "--tag", "a", "--tag", "b", "--restart"]
    )
    assert result.exit_code == 0, result.output
    assert seen == [Command(Path("d.jsonl"), Part(rank=2), ("a", "b"), resume=False)]
    seen.clear()
    assert CliRunner().invoke(app, ["--data", "d"]).exit_code == 0
    assert seen[0].part == Part(rank=8)  # the nested default instance's values
    assert CliRunner().invoke(app, ["--data", "d", "--lora-rank", "0"]).exit_code == 2
    assert CliRunner().invoke(app, []).exit_code == 2  # --data is required


def test_a_flag_generated_twice_is_refused() -> None:
    @dataclass(frozen=True)
    class Twice:
        one: Part = field(default_factory=Part)
        two: Part = field(default_factory=Part)

    with pytest.raises(ValueError, match="'rank' is generated twice"):
        field_options(Twice)


def test_pydantic_models_give_their_descriptions() -> None:
    class Model(BaseModel):
        model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

        port: Annotated[int, Flag(metavar="PORT")] = 8000
        """Port to bind."""

    [option] = field_options(Model)
    assert (option.flag, option.metavar, option.help, option.default) == (
        "--port",
        "PORT",
        "Port to bind.",
        8000,
    )
