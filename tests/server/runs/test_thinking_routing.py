"""Per-model thinking settings and helper models, from settings to a run's routing."""

from __future__ import annotations

from pathlib import Path

import pytest

from scaffolds.engines.mock import MockEngine
from scaffolds.errors import InvalidRequestError
from server.model_settings import ModelConfig
from server.pool.served_models import ServedModels
from server.runs.planning import plan_run
from server.runs.request import ChatCompletionRequest
from server.settings import Settings

MESSAGES = [{"role": "user", "content": "3+4="}]


def settings(**thinker: object) -> Settings:
    return Settings(
        models=(
            ModelConfig(name="thinker", engines=("http://unused/v1",), **thinker),  # type: ignore[arg-type]
            ModelConfig(name="instruct", engines=("http://unused/v1",)),
        )
    )


def build(config: Settings) -> ServedModels:
    engines = {"thinker": MockEngine(lambda r: "7"), "instruct": MockEngine(lambda r: "7")}
    return ServedModels.build(config, engines=engines)


def test_a_models_thinking_settings_reach_its_runs() -> None:
    config = settings(thinking=True, thinking_off="qwen3", helper_model="instruct")
    routing = build(config).models["thinker"].routing
    assert routing.thinking.declared and routing.helper == "instruct"
    assert routing.thinking.off == {"chat_template_kwargs": {"enable_thinking": False}}
    assert set(routing.models) == {"thinker", "instruct"}
    assert routing.models["instruct"].thinking.off == {}
    custom = settings(thinking_off='{"reasoning_effort": "minimal"}', thinking_end="<|end|>")
    thinking = build(custom).models["thinker"].routing.thinking
    assert thinking.off == {"reasoning_effort": "minimal"} and thinking.end == "<|end|>"


def test_unknown_presets_and_helper_models_are_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="thinking_off"):
        settings(thinking_off="qwen9")
    with pytest.raises(ValueError, match="helper_model"):
        settings(helper_model="nope")


def test_a_spec_naming_an_unserved_helper_model_is_a_400_naming_the_field() -> None:
    config = settings()
    served = build(config)
    ok = ChatCompletionRequest(
        model="thinker", messages=MESSAGES, scaffold='rc(steps=2, summarizer="instruct")'
    )
    assert plan_run(served, config, "chat", ok).strategy.named_models() == [
        ("scaffold.summarizer", "instruct")
    ]
    for scaffold, param in [
        ('rc(steps=2, summarizer="nope")', "scaffold.summarizer"),
        ('gsr(n=2, solver=self_refine(critic="nope"))', "scaffold.solver.critic"),
        ('best_of_n(n=2, judge_model="nope")', "scaffold.judge_model"),
        ('abstraction(m=2, abstractor="nope")', "scaffold.abstractor"),
    ]:
        req = ChatCompletionRequest(model="thinker", messages=MESSAGES, scaffold=scaffold)
        with pytest.raises(InvalidRequestError, match="'nope'") as err:
            plan_run(served, config, "chat", req)
        assert err.value.param == param
    req = ChatCompletionRequest(model='thinker+rc(summarizer="nope")', messages=MESSAGES)
    with pytest.raises(InvalidRequestError) as err:
        plan_run(served, config, "chat", req)
    assert err.value.param == "model.summarizer"


def test_an_alias_naming_an_unserved_helper_model_fails_at_start() -> None:
    config = Settings(model="m", engines=("http://unused/v1",), aliases={"r": 'rc(summarizer="x")'})
    with pytest.raises(InvalidRequestError) as err:
        ServedModels.build(config, engines={"m": MockEngine(lambda r: "7")})
    assert err.value.param == "aliases.m+r.summarizer"


def test_the_readmes_thinking_config_serves_a_reasoner_with_an_instruct_summarizer(
    tmp_path: Path,
) -> None:
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    block = readme.split("# ponder serve --config thinking.yaml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "thinking.yaml"
    path.write_text(block)
    config = Settings(config=path)
    names = [m.name for m in config.served_models()]
    served = build_named(config, names)
    thinker = served.models["qwen3-4b-thinking"]
    assert thinker.routing.helper == "qwen3-4b-instruct" and thinker.routing.thinking.declared
    assert thinker.routing.thinking.off == {"chat_template_kwargs": {"enable_thinking": False}}
    assert thinker.aliases["qwen3-4b-thinking+rc4"].name == "rc"


def build_named(config: Settings, names: list[str]) -> ServedModels:
    return ServedModels.build(config, engines={n: MockEngine(lambda r: "7") for n in names})
