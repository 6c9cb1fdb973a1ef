"""Settings: sources and their precedence, validation that names the parameter."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from scaffolds.errors import SpecError
from server.runs.handler import Serving
from server.settings import Settings, setting_errors

URL = "http://engine:8000/v1"


def _error(**fields: object) -> str:
    with pytest.raises(ValidationError) as info:
        Settings(**fields)  # type: ignore[arg-type]
    return setting_errors(info.value)


def test_flat_model_and_aliases() -> None:
    s = Settings(model="qwen3-4b", engines=(URL, URL + "/"), aliases=["gsr4=gsr(n=4)"])
    [m] = s.served_models()
    assert m.engines == (URL, URL)
    assert m.alias_specs() == {"qwen3-4b+gsr4": "gsr(n=4)"}
    assert m.served_engine_model == "qwen3-4b"


def test_frozen() -> None:
    s = Settings()
    with pytest.raises(ValidationError):
        s.port = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"model": "m", "engines": ("http://e",)}, "engines: engine base URL must end in /v1"),
        ({"model": "m"}, "engines: --engine"),
        ({"engines": (URL,)}, "model: --model"),
        ({"port": 70000}, "port:"),
        ({"max_concurrent_runs": 0}, "max_concurrent_runs:"),
        ({"reserved_runs": -1}, "reserved_runs:"),
        ({"model": "a+b", "engines": (URL,)}, "model:"),
        ({"model": "m", "engines": (URL,), "aliases": ["nospec"]}, "aliases:"),
        ({"api_key_file": "/no/such/file"}, "api_key_file: no such file"),
        ({"prompts": "fancy"}, "prompts:"),
        (
            {"model": "m", "engines": (URL,), "verifier": "m", "verifier_max_batch": 8},
            "verifier_max_batch is for a local:DIR verifier (its verifier is m)",
        ),
        ({"model": "m", "engines": (URL,), "verifier_max_batch": 8}, "(its verifier is none)"),
        ({"verifier": "local:v", "verifier_max_batch": 0}, "verifier_max_batch: Input should"),
    ],
)
def test_validation_names_the_parameter(fields: dict[str, object], needle: str) -> None:
    assert needle in _error(**fields)


def test_env_vars(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PONDER_MODEL", "m")
    monkeypatch.setenv("PONDER_ENGINES", f"{URL},http://other:1/v1")
    monkeypatch.setenv("PONDER_ALIASES", "g=gsr(n=4, solver=single); r=rc(steps=2)")
    monkeypatch.setenv("PONDER_API_KEYS", "k1,k2")
    monkeypatch.setenv("PONDER_MAX_CONCURRENT_RUNS", "3")
    monkeypatch.setenv("PONDER_RESERVED_RUNS", "2")
    s = Settings()
    [m] = s.served_models()
    assert m.engines == (URL, "http://other:1/v1")
    assert m.alias_specs() == {"m+g": "gsr(n=4, solver=single)", "m+r": "rc(steps=2)"}
    assert s.client_api_keys() == ("k1", "k2")
    assert s.max_concurrent_runs == 3
    assert s.reserved_runs == 2
    assert "k1" not in repr(s)  # keys are secrets
    # Flags (init arguments) beat the environment.
    assert Settings(max_concurrent_runs=5).max_concurrent_runs == 5


YAML = """
max_concurrent_runs: 7
api_keys: [file-key]
models:
  - name: qwen3-4b
    engines: [http://a:8000/v1, http://b:8000/v1]
    engine_api_key: engine-secret
    default_scaffold: gsr(n=2)
    aliases: {rc3: "rc(steps=3)"}
  - name: tiny
    engines: http://c:8000/v1
    prompts: compact
"""

TOML = """
max_concurrent_runs = 7
api_keys = ["file-key"]

[[models]]
name = "qwen3-4b"
engines = ["http://a:8000/v1", "http://b:8000/v1"]
engine_api_key = "engine-secret"
default_scaffold = "gsr(n=2)"
aliases = { rc3 = "rc(steps=3)" }

[[models]]
name = "tiny"
engines = "http://c:8000/v1"
prompts = "compact"
"""


@pytest.mark.parametrize(("suffix", "text"), [(".yaml", YAML), (".toml", TOML)])
def test_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str, text: str
) -> None:
    path = tmp_path / f"ponder{suffix}"
    path.write_text(text)
    s = Settings(config=path)
    big, tiny = s.served_models()
    assert big.engines == ("http://a:8000/v1", "http://b:8000/v1")
    assert big.engine_api_key is not None
    assert big.engine_api_key.get_secret_value() == "engine-secret"
    assert big.alias_specs() == {"qwen3-4b+rc3": "rc(steps=3)"}
    assert tiny.prompts == "compact" and tiny.default_scaffold == "single"
    assert s.max_concurrent_runs == 7
    # The environment beats the file, flags beat both.
    monkeypatch.setenv("PONDER_MAX_CONCURRENT_RUNS", "9")
    assert Settings(config=path).max_concurrent_runs == 9
    assert Settings(config=path, max_concurrent_runs=11).max_concurrent_runs == 11
    # PONDER_CONFIG names the file too.
    monkeypatch.setenv("PONDER_CONFIG", str(path))
    assert len(Settings().served_models()) == 2


def test_config_file_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("models:\n  - name: m\n    engines: [http://a/v1]\n    colour: red\n")
    assert "models.0.colour" in _error(config=bad)
    with pytest.raises(ValueError, match="no such file"):
        Settings(config=tmp_path / "missing.yaml")


def test_key_file(tmp_path: Path) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("# comment\nk-one\n\nk-two\n")
    s = Settings(api_keys=("k-zero", "k-one"), api_key_file=keys)
    assert s.client_api_keys() == ("k-zero", "k-one", "k-two")


def test_bad_alias_spec_fails_at_build_naming_it() -> None:
    s = Settings(model="m", engines=(URL,), aliases={"g": "gsr(n=0)"})
    with pytest.raises(SpecError) as info:
        Serving.build(s)
    assert info.value.param == "aliases.m+g.n"
    s = Settings(model="m", engines=(URL,), default_scaffold="nope")
    with pytest.raises(SpecError) as info:
        Serving.build(s)
    assert info.value.param == "models.m.default_scaffold.name"
