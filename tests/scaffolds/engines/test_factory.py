"""The one engine factory: each URL scheme, options, and errors that name the URL."""

from __future__ import annotations

from pathlib import Path

import pytest

from scaffolds.dependencies import installed
from scaffolds.engines.factory import (
    SCHEMES,
    EngineOptions,
    check_engine_url,
    engine_from_url,
    engine_scheme,
)
from scaffolds.engines.local import LocalEngine
from scaffolds.engines.openai_http import OpenAIEngine
from scaffolds.engines.vllm_inprocess import InProcessVLLMEngine
from scaffolds.errors import MissingDependencyError


def test_http_urls_build_an_openai_engine_with_the_options() -> None:
    options = EngineOptions(
        model="m", api_key="k", dialect="sglang", read_timeout=7.0, max_retries=1, pool_shards=2
    )
    engine = engine_from_url("https://engine.example/v1/", options)
    assert isinstance(engine, OpenAIEngine)
    assert engine.base_url == "https://engine.example/v1" and engine.model == "m"
    assert engine.dialect.name == "sglang" and engine.read_timeout == 7.0
    assert engine.max_retries == 1 and engine.pool_shards == 2
    assert engine_scheme("http://e/v1").chat and engine_scheme("http://e/v1").parallel


def test_an_http_engine_needs_a_model() -> None:
    with pytest.raises(ValueError, match="needs a model name"):
        engine_from_url("http://e/v1")


@pytest.mark.parametrize("prefix", ["local:", "hf:"])
def test_local_and_its_hf_alias_run_a_directory_in_process(prefix: str, tmp_path: Path) -> None:
    engine = engine_from_url(f"{prefix}{tmp_path}", EngineOptions(threads=1))
    assert isinstance(engine, LocalEngine) and engine.model_dir == tmp_path
    assert not engine.loaded  # loading waits for the first call unless asked for
    scheme = engine_scheme(f"{prefix}{tmp_path}")
    assert scheme.name == "local" and not scheme.chat and not scheme.parallel


def test_load_now_fails_on_a_bad_directory(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="cannot load"):
        engine_from_url(f"local:{tmp_path / 'missing'}", EngineOptions(load=True))


def test_vllm_runs_a_directory_in_vllms_engine(tmp_path: Path) -> None:
    if not installed("vllm"):  # the development venv: vLLM lives in .venv-vllm
        with pytest.raises(MissingDependencyError, match=r"pip install -e '\.\[vllm\]'"):
            engine_from_url(f"vllm:{tmp_path}")
        return
    engine = engine_from_url(f"vllm:{tmp_path}")
    assert isinstance(engine, InProcessVLLMEngine) and engine.model == str(tmp_path)
    assert not engine.started


def test_an_unknown_scheme_names_the_url_and_every_scheme() -> None:
    with pytest.raises(ValueError) as info:
        engine_from_url("grpc://engine:50051")
    message = str(info.value)
    assert "'grpc://engine:50051'" in message
    for scheme in SCHEMES:
        assert scheme.usage in message


def test_check_engine_url(tmp_path: Path) -> None:
    assert check_engine_url(" http://e:1/v1/ ") == "http://e:1/v1"
    with pytest.raises(ValueError, match="must end in /v1"):
        check_engine_url("http://e:1")
    with pytest.raises(ValueError, match=r"config\.json"):
        check_engine_url(f"local:{tmp_path}")
    (tmp_path / "config.json").write_text("{}")
    assert check_engine_url(f"hf:{tmp_path}") == f"hf:{tmp_path}"
    assert check_engine_url(f"vllm:{tmp_path}") == f"vllm:{tmp_path}"
