"""``ponder serve`` with no engine: the shipped model, in process, behind the real server."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from scaffolds.models import get_model
from server.pool.embedded import (
    EMBEDDED_MODEL,
    SHIPPED_MODEL_DIR,
    embedded_config,
    with_embedded_default,
)
from server.settings import Settings
from testing.ponder import running_ponder


def test_the_embedded_default_answers_with_the_shipped_model() -> None:
    settings = with_embedded_default(Settings())
    [config] = settings.served_models()
    assert config.engines == (f"local:{SHIPPED_MODEL_DIR}",) and config.default_max_tokens == 8
    with running_ponder(settings) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        ids = [m.id for m in client.models.list().data]
        assert ids[0] == EMBEDDED_MODEL and f"{EMBEDDED_MODEL}+maj8" in ids
        reply = client.chat.completions.create(
            model=f"{EMBEDDED_MODEL}+maj8",
            messages=[{"role": "user", "content": "347+589="}],
            temperature=1.0,
        )
        greedy = client.chat.completions.create(
            model=EMBEDDED_MODEL,
            messages=[{"role": "user", "content": "120+111="}],
            temperature=0.0,
        )
    answer = reply.choices[0].message.content or ""
    assert answer.isdigit() and 3 <= len(answer) <= 4
    assert reply.usage is not None and reply.usage.completion_tokens >= 8 * 3
    assert (reply.usage.model_extra or {})["engine_calls"] == 1
    assert (greedy.choices[0].message.content or "").isdigit()


def test_configured_models_are_left_alone() -> None:
    settings = Settings(model="m", engines=("http://127.0.0.1:1/v1",))
    assert with_embedded_default(settings) is settings


def test_a_local_engine_must_name_a_model_directory() -> None:
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=r"config\.json"):
        Settings(model="m", engines=("local:/no/such/model",))


def test_the_real_model_is_served_with_its_model_cards_sampling(tmp_path: Path) -> None:
    config = embedded_config(get_model("smollm2-135m-instruct"), tmp_path, "http://e/v1")
    assert (config.default_temperature, config.default_top_p) == (0.2, 0.9)
    assert config.engines == ("http://e/v1",) and config.prompts == "default"


def test_the_startup_line_while_preparing_says_what_happens_not_what_to_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PONDER_HOME is empty, so SmolLM2 is not prepared: the line says it is being
    prepared, never `run ponder models prepare` (which the server is doing itself)."""
    from server.pool import embedded

    monkeypatch.setenv("PONDER_HOME", str(tmp_path))
    monkeypatch.setattr(embedded, "prepare_model", lambda model, say: tmp_path / model.name)
    said: list[str] = []
    assert embedded._prepared(get_model("smollm2-135m-instruct"), said.append) is not None
    assert said == [
        "preparing 'smollm2-135m-instruct' once from its wheel (about 30 s, the first time only)"
    ]


def test_the_addition_model_advertises_no_scaffold_it_cannot_run() -> None:
    assert dict(get_model(EMBEDDED_MODEL).aliases) == {
        "maj8": "majority(k=8)",
        "best4": "best_of_n(n=4)",
    }


def test_every_shipped_chat_model_asked_for_alone_is_served() -> None:
    """``--embedded-model NAME`` alone serves NAME, an adapter on SmolLM2 included (it
    brought nothing when SmolLM2 itself was not asked for too); a verifier comes with the
    model it verifies, never as a chat model of its own."""
    from scaffolds.models import known_models
    from server.pool.embedded import _plan

    chat = [m for m in known_models() if m.verifies is None]
    assert {"ponder-addition", "smollm2-135m-instruct", "smollm2-135m-gsr"} <= {
        m.name for m in chat
    }
    for model in chat:
        planned = [m.name for m in _plan({model.name})]
        assert planned[0] == model.name, (model.name, planned)
        verifiers = {m.name for m in known_models() if m.verifies == model.name}
        assert set(planned) == {model.name} | verifiers, (model.name, planned)
