"""``ponder serve``'s options are generated from Settings: flags, env vars, defaults, help."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clients.cli import app
from server.app import listener
from server.cli import setting_options
from server.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
URL = "http://engine:8000/v1"


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[Settings]:
    """What ``ponder serve`` would serve, instead of serving it (on a port of its own)."""
    seen: list[Settings] = []
    bind = listener.bind_listener
    monkeypatch.setattr(listener, "bind_listener", lambda host, port: bind("127.0.0.1", 0))
    monkeypatch.setattr("server.app.app.serve", lambda settings, sock: seen.append(settings))
    return seen


def test_a_flag_beats_its_env_var_which_beats_the_config_file(
    served: list[Settings], tmp_path: Path
) -> None:
    config = tmp_path / "ponder.yaml"
    config.write_text("max_concurrent_runs: 3\nqueue_size: 9\nport: 1234\n")
    result = CliRunner().invoke(
        app,
        [
            "serve",
            "--model",
            "m",
            "--engine",
            URL,
            "--config",
            str(config),
            "--max-concurrent-runs",
            "5",
            "--graceful-timeout",
            "2",
            "--log-text",
        ],
        env={"PONDER_QUEUE_SIZE": "7", "PONDER_MAX_CONCURRENT_RUNS": "6"},
    )
    assert result.exit_code == 0, result.output
    [settings] = served
    assert settings.max_concurrent_runs == 5  # flag > env > file
    assert settings.queue_size == 7  # env > file
    assert settings.port == 1234  # file > default
    assert settings.spec_max_depth == 4  # the model's default
    assert settings.graceful_timeout_s == 2.0 and settings.log_json is False


def test_repeatable_flags(served: list[Settings]) -> None:
    result = CliRunner().invoke(
        app,
        [
            "serve",
            "--model",
            "m",
            "--engine",
            URL,
            "--engine",
            "http://other:1/v1",
            "--alias",
            "g=gsr(n=2)",
            "--alias",
            "r=rc(steps=2)",
            "--api-key",
            "k1",
            "--api-key",
            "k2",
            "--max-budget-timeout",
            "60",
        ],
    )
    assert result.exit_code == 0, result.output
    [settings] = served
    [model] = settings.served_models()
    assert model.engines == (URL, "http://other:1/v1")
    assert model.alias_specs() == {"m+g": "gsr(n=2)", "m+r": "rc(steps=2)"}
    assert settings.client_api_keys() == ("k1", "k2")
    assert settings.max_budget_timeout_s == 60.0


def test_every_field_with_a_flag_is_an_option_and_the_help_shows_its_default() -> None:
    result = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    options = setting_options()
    assert {o.field for o in options} == set(Settings.model_fields) - {"models"}
    for option in options:
        assert option.flag in text and option.env in text, option.field
        default = Settings.model_fields[option.field].get_default(call_default_factory=True)
        if default not in (None, (), {}) and not isinstance(default, bool):
            shown = int(default) if isinstance(default, float) and default.is_integer() else default
            assert f"[default: {shown}]" in option.help and f"[default: {shown}]" in text


def test_the_readme_flag_table_names_every_option() -> None:
    readme = (ROOT / "README.md").read_text()
    table = readme.split("### Every flag", 1)[1].split("## Engines", 1)[0]
    for option in setting_options():
        assert f"`{option.flag}" in table, option.flag
        assert f"`{option.env}`" in table, option.env


def test_importing_the_ponder_command_imports_neither_server_nor_training() -> None:
    code = (
        "import sys, clients.cli\n"
        "from typer.testing import CliRunner\n"
        "CliRunner().invoke(clients.cli.app, ['--help'])\n"
        "CliRunner().invoke(clients.cli.app, ['eval', '--help'])\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('server', 'training'))\n"
        "print(bad)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout
