"""A client key's ``models`` allow-list filters ``/v1/models`` by the rule that admits its
runs, against the real server (uvicorn on loopback, a keys file, the fake engine, the
openai SDK): a key lists exactly the ids it may run, and the card of a model it may not
use is the same 404 as a model that does not exist. A key without an allow-list (and a
bare ``--api-key``) sees every model, as before keys had limits."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from server.keys import write_keys_document
from server.settings import Settings
from testing.fake_engine import FakeEngineHandle, running_fake_engine
from testing.ponder import running_ponder
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


def oai(url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=300)


def card(url: str, key: str, model: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.get(f"{url}/v1/models/{model}", headers=headers, timeout=300)


@pytest.mark.parametrize("key", list(SEES))
def test_a_key_lists_only_the_models_it_may_use(ponder: str, key: str) -> None:
    listed = [m.id for m in oai(ponder, key).models.list()]
    assert listed == SEES[key]
    for model in EVERY:
        if model in SEES[key]:
            assert oai(ponder, key).models.retrieve(model).id == model
        else:
            with pytest.raises(openai.NotFoundError):
                oai(ponder, key).models.retrieve(model)


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
    """One rule: every id a key lists runs (200), every id it does not is refused (403)."""
    for model in EVERY:
        asked = {"model": model, "messages": [{"role": "user", "content": "2+2?"}]}
        answer = httpx.post(
            f"{ponder}/v1/chat/completions",
            json=asked,
            headers={"Authorization": f"Bearer {key}"},
            timeout=300,
        )
        if model in SEES[key]:
            assert answer.status_code == 200, answer.text
        else:
            assert answer.status_code == 403
            assert answer.json()["error"]["code"] == "model_not_found"


def test_an_unknown_model_names_only_the_models_the_key_may_use(ponder: str) -> None:
    with pytest.raises(openai.NotFoundError) as refused:
        oai(ponder, ALICE).chat.completions.create(
            model="nosuch", messages=[{"role": "user", "content": "2+2?"}]
        )
    assert "(known: m, m+two)" in refused.value.message
    with pytest.raises(openai.NotFoundError) as everyone:
        oai(ponder, CAROL).chat.completions.create(
            model="nosuch", messages=[{"role": "user", "content": "2+2?"}]
        )
    assert "(known: m, m+two, n, n+two)" in everyone.value.message
