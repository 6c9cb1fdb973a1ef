"""A client key's ``models`` allow-list filters ``/v1/models`` by the rule that admits its
runs, against the real server (uvicorn on loopback, a keys file, the fake engine, the
openai and anthropic SDKs): a key lists exactly the ids it may run, and a model it may not
use is answered as a model that does not exist, on every route that names one (its card,
a run on each API, the tokenizer routes, a helper model in a spec): the same status and
body but for the name, so a key cannot tell a hidden model from a missing one. A key
without an allow-list (and a bare ``--api-key``) sees every model, as before keys had
limits."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from server.keys import write_keys_document
from server.settings import Settings
from testing.fake_engine import FakeEngineHandle, running_fake_engine
from testing.ponder import openai_client, running_ponder
from tests.server.conftest import STORE_IN_MEMORY

ALICE, BOB, CAROL, FLAT = "sk-alice", "sk-bob", "sk-carol", "sk-flat"
EVERY = ["m", "m+two", "n", "n+two"]
SEES = {
    ALICE: ["m", "m+two"],  # models: [m], a base model: its aliases too
    BOB: ["n+two"],  # models: [n+two], an alias: only itself
    CAROL: EVERY,  # no allow-list
    FLAT: EVERY,  # a bare key
}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeEngineHandle]:
    with running_fake_engine() as handle:
        yield handle


@pytest.fixture(scope="module")
def ponder(fake: FakeEngineHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    keys = tmp_path_factory.mktemp("allow") / "keys.yaml"
    write_keys_document(
        keys,
        {
            "keys": [
                {"name": "alice", "key": ALICE, "limits": {"models": ["m"]}},
                {"name": "bob", "key": BOB, "limits": {"models": ["n+two"]}},
                {"name": "carol", "key": CAROL, "limits": {"scaffolds": ["single", "majority"]}},
            ]
        },
    )
    models = [
        {
            "name": name,
            "engines": [fake.base_url],
            "engine_model": "fake-model",
            "aliases": {"two": "majority(k=2)"},
        }
        for name in ("m", "n")
    ]
    settings = Settings(
        models=models,  # type: ignore[arg-type]
        api_keys=(FLAT,),
        keys_file=keys,
        engine_max_retries=0,
        **STORE_IN_MEMORY,  # type: ignore[arg-type]
    )
    with running_ponder(settings) as url:
        yield url


def card(url: str, key: str, model: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.get(f"{url}/v1/models/{model}", headers=headers, timeout=300)


def post(url: str, key: str, path: str, body: dict[str, Any]) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.post(f"{url}{path}", json=body, headers=headers, timeout=300)


def renamed(body: Any, old: str, new: str) -> Any:
    """``body`` with every mention of the model ``old`` made ``new``."""
    return json.loads(json.dumps(body).replace(old, new))


QUESTION = [{"role": "user", "content": "2+2?"}]
RUNS: dict[str, Callable[[str], dict[str, Any]]] = {
    "/v1/chat/completions": lambda model: {"model": model, "messages": QUESTION},
    "/v1/completions": lambda model: {"model": model, "prompt": "2+2?"},
    "/v1/responses": lambda model: {"model": model, "input": "2+2?"},
    "/v1/messages": lambda model: {"model": model, "max_tokens": 16, "messages": QUESTION},
    "/v1/messages/count_tokens": lambda model: {"model": model, "messages": QUESTION},
    "/tokenize": lambda model: {"model": model, "prompt": "2+2?"},
    "/detokenize": lambda model: {"model": model, "tokens": [1, 2]},
}
"""Each route that names a model in its body, and a body naming ``model``."""


@pytest.mark.parametrize("key", list(SEES))
def test_a_key_lists_only_the_models_it_may_use(ponder: str, key: str) -> None:
    listed = [m.id for m in openai_client(ponder, key).models.list()]
    assert listed == SEES[key]
    for model in EVERY:
        if model in SEES[key]:
            assert openai_client(ponder, key).models.retrieve(model).id == model
        else:
            with pytest.raises(openai.NotFoundError):
                openai_client(ponder, key).models.retrieve(model)


def test_a_hidden_models_card_is_the_404_of_a_model_that_does_not_exist(ponder: str) -> None:
    def error(model: str) -> dict[str, Any]:
        answer = card(ponder, ALICE, model)
        assert answer.status_code == 404
        body: dict[str, Any] = answer.json()
        return body

    hidden, never = error("n+two"), error("nosuch")
    assert hidden == {
        "error": never["error"] | {"message": never["error"]["message"].replace("nosuch", "n+two")}
    }
    assert card(ponder, CAROL, "n+two").status_code == 200


@pytest.mark.parametrize("key", [ALICE, BOB])
def test_the_list_is_what_admission_lets_the_key_run(ponder: str, key: str) -> None:
    """One rule: every id a key lists runs (200), every id it does not is the 404 of a
    model that does not exist."""
    never = post(ponder, key, "/v1/chat/completions", RUNS["/v1/chat/completions"]("nosuch"))
    assert never.status_code == 404
    for model in EVERY:
        answer = post(ponder, key, "/v1/chat/completions", RUNS["/v1/chat/completions"](model))
        if model in SEES[key]:
            assert answer.status_code == 200, answer.text
        else:
            assert answer.status_code == 404
            assert answer.json() == renamed(never.json(), "nosuch", model)


@pytest.mark.parametrize("path", list(RUNS))
@pytest.mark.parametrize("hidden", ["n", "n+two", "n+gsr(n=2)", "n+nosuch(k=2)"])
def test_a_hidden_model_is_the_404_of_a_missing_one_on_every_route(
    ponder: str, path: str, hidden: str
) -> None:
    """Status, headers that matter and body, but for the name: a malformed spec on a
    hidden model too (the model is refused before its spec is read)."""
    never = post(ponder, ALICE, path, RUNS[path]("nosuch"))
    answer = post(ponder, ALICE, path, RUNS[path](hidden))
    assert (answer.status_code, never.status_code) == (404, 404)
    assert answer.json() == renamed(never.json(), "nosuch", hidden)
    assert "(known: m, m+two)" in answer.json()["error"]["message"]
    assert answer.headers["content-type"] == never.headers["content-type"]


def test_the_sdks_raise_the_same_not_found_for_a_hidden_model_and_a_missing_one(
    ponder: str,
) -> None:
    client = openai_client(ponder, ALICE)
    calls: list[Callable[[str], object]] = [
        lambda model: client.chat.completions.create(model=model, messages=QUESTION),  # type: ignore[arg-type]
        lambda model: client.completions.create(model=model, prompt="2+2?"),
        lambda model: client.responses.create(model=model, input="2+2?"),
        lambda model: client.models.retrieve(model),
    ]
    for call in calls:
        with pytest.raises(openai.NotFoundError) as hidden:
            call("n+two")
        with pytest.raises(openai.NotFoundError) as never:
            call("nosuch")
        assert hidden.value.code == never.value.code == "model_not_found"
        assert hidden.value.message == never.value.message.replace("nosuch", "n+two")
        assert "does not exist or you do not have access to it" in hidden.value.message
    claude = anthropic.Anthropic(base_url=ponder, api_key=ALICE, max_retries=0, timeout=300)
    messages: Any = QUESTION
    with pytest.raises(anthropic.NotFoundError) as hidden_message:
        claude.messages.create(model="n+two", max_tokens=16, messages=messages)
    with pytest.raises(anthropic.NotFoundError) as never_message:
        claude.messages.create(model="nosuch", max_tokens=16, messages=messages)
    assert hidden_message.value.body == renamed(never_message.value.body, "nosuch", "n+two")


def test_a_hidden_helper_model_in_a_spec_is_a_model_that_is_not_served(ponder: str) -> None:
    """A spec's helper model runs on its own engine: one the key may not use is the 400 of
    one the server does not serve, naming only the models the key may use."""

    def asked(helper: str) -> httpx.Response:
        body = RUNS["/v1/chat/completions"]("m") | {"scaffold": f'rc(summarizer="{helper}")'}
        return post(ponder, ALICE, "/v1/chat/completions", body)

    hidden, never = asked("n"), asked("nosuch")
    assert (hidden.status_code, never.status_code) == (400, 400)
    assert hidden.json() == renamed(never.json(), "nosuch", "n")
    assert "(served: m)" in hidden.json()["error"]["message"]
    body = RUNS["/v1/chat/completions"]("n") | {"scaffold": 'rc(summarizer="n")'}
    assert post(ponder, FLAT, "/v1/chat/completions", body).status_code == 200
