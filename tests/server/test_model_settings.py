"""The effort policy in a model's configuration: its schema, its file, its errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from scaffolds.engines.mock import MockEngine
from scaffolds.errors import SpecError
from server.model_settings import (
    DEFAULT_EFFORT_POLICY,
    EffortLevel,
    EffortPolicy,
    ModelConfig,
)
from server.pool.embedded import with_embedded_default
from server.pool.served_models import ServedModels
from server.settings import Settings

POLICY = {
    "minimal": {"spec": "single", "budget": 1000},
    "low": {"spec": "majority(k=4)", "budget": 4000},
    "medium": {"spec": "majority(k=8)", "budget": 8000},
    "high": {"spec": "majority(k=16)", "budget": 16000},
}


def test_a_policy_names_a_spec_and_budget_per_level_and_auto_defaults_to_high() -> None:
    policy = EffortPolicy.model_validate(POLICY)
    assert policy.level("low") == EffortLevel(spec="majority(k=4)", budget=4000)
    assert policy.level("auto") == policy.high
    own = EffortPolicy.model_validate(POLICY | {"auto": {"spec": "adaptive()"}})
    assert own.level("auto").spec == "adaptive()" and own.level("auto").budget is None


def test_a_thinking_budget_selects_the_cheapest_level_that_covers_it() -> None:
    policy = EffortPolicy.model_validate(POLICY)
    assert [policy.for_budget(n) for n in (1, 1000, 1001, 4000, 8001, 16000, 10**9)] == [
        "minimal",
        "minimal",
        "low",
        "low",
        "high",
        "high",
        "high",
    ]
    uncapped = EffortPolicy.model_validate(
        POLICY | {"medium": {"spec": "majority(k=8)"}, "high": {"spec": "majority(k=16)"}}
    )
    assert uncapped.for_budget(10**9) == "medium"  # no budget: it covers any


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"low": {"spec": "majority(k=4)", "budget": 999}}, "low.budget .999. is below minimal"),
        ({"high": {"spec": "majority(k=16)", "budget": 10}}, "high.budget"),
        ({"medium": {"spec": "majority(k=8)"}}, "high.budget .16000. is below medium"),
        ({"extreme": {"spec": "single"}}, "extreme"),
        ({"low": {"spec": ""}}, "low.spec"),
        ({"low": {"spec": "single", "budget": 0}}, "low.budget"),
        ({"low": {"spec": "single", "max": 3}}, "low.max"),
    ],
)
def test_a_malformed_policy_is_refused_naming_what(change: dict[str, object], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        EffortPolicy.model_validate(POLICY | change)
    with pytest.raises(ValidationError):
        EffortPolicy.model_validate({k: v for k, v in POLICY.items() if k != "medium"})


@pytest.mark.parametrize("suffix", [".yaml", ".json", ".toml"])
def test_a_policy_loads_from_a_file_inline_or_as_json(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"policy{suffix}"
    if suffix == ".toml":
        path.write_text(
            "".join(
                f'[{name}]\nspec = "{level["spec"]}"\nbudget = {level["budget"]}\n'
                for name, level in POLICY.items()
            )
        )
    else:
        path.write_text(json.dumps(POLICY))  # JSON is YAML too
    expected = EffortPolicy.model_validate(POLICY)
    for given in (path, str(path), POLICY, json.dumps(POLICY)):
        config = ModelConfig(name="m", engines="http://e/v1", effort_policy=given)
        assert config.effort_policy == expected and config.effort_mode() == "policy"


def test_a_missing_or_unreadable_policy_file_names_the_field(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="effort_policy: cannot read"):
        ModelConfig(name="m", engines="http://e/v1", effort_policy=tmp_path / "none.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("minimal: [unclosed\n")
    with pytest.raises(ValidationError, match=r"effort_policy: .*bad\.yaml.* is not valid"):
        ModelConfig(name="m", engines="http://e/v1", effort_policy=bad)


def test_passthrough_and_a_policy_together_are_refused() -> None:
    assert ModelConfig(name="m", engines="http://e/v1").effort_mode() == "passthrough"
    with pytest.raises(ValidationError, match="effort passthrough"):
        ModelConfig(name="m", engines="http://e/v1", effort="passthrough", effort_policy=POLICY)
    with pytest.raises(ValidationError, match="effort"):
        ModelConfig(name="m", engines="http://e/v1", effort="extreme")  # type: ignore[arg-type]


def test_the_flat_settings_and_env_take_a_policy_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(json.dumps(POLICY))
    monkeypatch.setenv("PONDER_EFFORT_POLICY", str(path))
    settings = Settings(model="m", engines=("http://e/v1",))
    (config,) = settings.served_models()
    assert config.effort_policy == EffortPolicy.model_validate(POLICY)


def test_every_level_is_built_at_start_and_a_bad_spec_fails_naming_it() -> None:
    settings = Settings(model="m", engines=("http://e/v1",), effort_policy=POLICY)
    served = ServedModels.build(settings, engines={"m": MockEngine(lambda r: "4")})
    effort = served.models["m"].effort
    assert {level: s.name for level, s in effort.items()} == {
        "minimal": "single",
        "low": "majority",
        "medium": "majority",
        "high": "majority",
        "auto": "majority",
    }
    broken = POLICY | {"high": {"spec": "majority(q=2)", "budget": 16000}}
    settings = Settings(model="m", engines=("http://e/v1",), effort_policy=broken)
    with pytest.raises(SpecError) as err:
        ServedModels.build(settings, engines={"m": MockEngine(lambda r: "4")})
    assert (err.value.param or "").startswith("models.m.effort_policy.high")


def test_the_embedded_default_serves_the_measured_policy() -> None:
    (config,) = with_embedded_default(Settings()).served_models()
    assert config.effort_policy == DEFAULT_EFFORT_POLICY
    assert [DEFAULT_EFFORT_POLICY.level(n).spec for n in ("minimal", "medium", "high")] == [
        "single",
        "majority(k=8)",
        "adaptive(max_k=16, wave=4)",
    ]


def test_the_default_budgets_allow_8192_tokens_per_sample_of_each_level() -> None:
    """The README's claim: a level's budget is 8,192 tokens per sample of its largest draw
    (single: 1; majority(k): k; adaptive(max_k): max_k)."""
    draws = {"minimal": 1, "low": 4, "medium": 8, "high": 16, "auto": 16}  # auto: max_k=16
    for level, samples in draws.items():
        assert DEFAULT_EFFORT_POLICY.level(level).budget == 8192 * samples  # type: ignore[arg-type]


def test_a_config_file_names_a_models_policy_file_or_holds_it(tmp_path: Path) -> None:
    """``ponder serve --config``: one model's ``effort_policy`` is a file the calibration
    wrote, another's is inline, a third passes efforts through."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(json.dumps(POLICY))
    config = tmp_path / "ponder.yaml"
    config.write_text(
        "models:\n"
        f"  - {{name: a, engines: [http://e/v1], effort_policy: {policy}}}\n"
        "  - name: b\n"
        "    engines: [http://e/v1]\n"
        "    effort_policy:\n"
        "      minimal: {spec: single}\n"
        "      low: {spec: single}\n"
        "      medium: {spec: single}\n"
        "      high: {spec: 'majority(k=2)'}\n"
        "  - {name: c, engines: [http://e/v1], effort: passthrough}\n"
    )
    a, b, c = Settings(config=config).served_models()
    assert a.effort_policy == EffortPolicy.model_validate(POLICY)
    assert b.effort_policy is not None and b.effort_policy.level("auto").spec == "majority(k=2)"
    assert (c.effort_policy, c.effort_mode()) == (None, "passthrough")
