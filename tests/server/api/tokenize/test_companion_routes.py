"""The routes clients expect beside the served ones, against ``ponder serve`` on loopback
with the addition model in process (its tokenizer computes ``/tokenize``): a stored
response's input items through the openai SDK's paging, Anthropic's ``count_tokens``
through the anthropic SDK, vLLM's ``/tokenize``, ``/detokenize`` and ``/version``, each
checked against the model's tokenizer read here with transformers; their errors in the
OpenAI shape. A model whose engine has no tokenizer Ponder can reach answers 400."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from server.settings import Settings
from testing.ponder import running_ponder
from tests.server.conftest import ROOT, store_in

KEY = "sk-companion"
MODEL = "ponder-addition"
MODEL_DIR = ROOT / "scaffolds" / "models" / MODEL
AUTH = {"Authorization": f"Bearer {KEY}"}

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def ponder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    settings = Settings(
        model=MODEL,
        engines=(f"local:{MODEL_DIR}",),
        api_keys=(KEY,),
        aliases={"g2": "gsr(n=2)"},
        **store_in(tmp_path_factory.mktemp("responses")),
    )
    with running_ponder(settings) as url:
        yield url


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return transformers.AutoTokenizer.from_pretrained(str(MODEL_DIR))


def post(url: str, path: str, body: dict[str, Any], **kw: Any) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, headers=kw.pop("headers", AUTH), timeout=60)


def assert_error(reply: httpx.Response, status: int, param: str | None) -> dict[str, Any]:
    assert reply.status_code == status, reply.text
    error: dict[str, Any] = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["param"] == param
    return error


def test_input_items_page_through_the_openai_sdk(ponder: str) -> None:
    client = openai.OpenAI(base_url=f"{ponder}/v1", api_key=KEY, max_retries=0, timeout=120)
    first = client.responses.create(model=MODEL, input="12+34=", max_output_tokens=8)
    second = client.responses.create(
        model=MODEL, input="3+4=", max_output_tokens=8, previous_response_id=first.id
    )
    whole = client.responses.input_items.list(second.id, limit=100, order="asc")
    assert not whole.has_more
    texts = [(item.role, item.content[0].text) for item in whole.data]  # type: ignore[union-attr]
    # The earlier turn (its input and output), then this response's input.
    assert texts == [("user", "12+34="), ("assistant", first.output_text), ("user", "3+4=")]
    assert [item.content[0].type for item in whole.data] == [  # type: ignore[union-attr]
        "input_text",
        "output_text",
        "input_text",
    ]
    ids = [item.id for item in whole.data]
    assert len(set(ids)) == 3
    # The SDK follows ``after`` from page to page; the default order is newest first.
    assert [item.id for item in client.responses.input_items.list(second.id, limit=1)] == ids[::-1]
    page = client.responses.input_items.list(second.id, limit=2)
    assert (page.first_id, page.last_id, page.has_more) == (ids[2], ids[1], True)
    again = client.responses.input_items.list(second.id, order="asc", after=ids[0])
    assert [item.id for item in again.data] == ids[1:]
    only = client.responses.input_items.list(first.id).data
    assert [(i.role, i.content[0].text) for i in only] == [("user", "12+34=")]  # type: ignore[union-attr]


def test_input_items_errors(ponder: str) -> None:
    client = openai.OpenAI(base_url=f"{ponder}/v1", api_key=KEY, max_retries=0, timeout=120)
    stored = client.responses.create(model=MODEL, input="1+1=", max_output_tokens=8)
    path = f"{ponder}/v1/responses/{stored.id}/input_items"
    assert_error(httpx.get(f"{ponder}/v1/responses/resp_nope/input_items", headers=AUTH), 404, "id")
    assert_error(httpx.get(path, params={"limit": 0}, headers=AUTH), 400, "limit")
    assert_error(httpx.get(path, params={"limit": 101}, headers=AUTH), 400, "limit")
    assert_error(httpx.get(path, params={"order": "up"}, headers=AUTH), 400, "order")
    assert_error(httpx.get(path, params={"after": "msg_nope"}, headers=AUTH), 400, "after")
    assert httpx.get(path).status_code == 401
    unstored = client.responses.create(model=MODEL, input="1+1=", max_output_tokens=8, store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list(unstored.id)


def chat_ids(tokenizer: Any, messages: list[dict[str, Any]]) -> list[int]:
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return [int(i) for i in tokenizer(text, add_special_tokens=False)["input_ids"]]


def test_count_tokens_through_the_anthropic_sdk(ponder: str, tokenizer: Any) -> None:
    client = anthropic.Anthropic(base_url=ponder, api_key=KEY, max_retries=0, timeout=60)
    messages: list[Any] = [
        {"role": "user", "content": "12+34="},
        {"role": "assistant", "content": [{"type": "text", "text": "46"}]},
        {"role": "user", "content": "46+1="},
    ]
    counted = client.messages.count_tokens(model=f"{MODEL}+g2", messages=messages)
    texts = ["12+34=", "46", "46+1="]
    plain = [{"role": m["role"], "content": t} for m, t in zip(messages, texts, strict=True)]
    expected = chat_ids(tokenizer, plain)
    assert counted.input_tokens == len(expected) > 0
    with pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(model="nope", messages=messages)
    with pytest.raises(anthropic.BadRequestError):
        client.messages.count_tokens(model=MODEL, messages=[])
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(
            base_url=ponder, api_key="sk-wrong", max_retries=0
        ).messages.count_tokens(model=MODEL, messages=messages)


def test_tokenize_and_detokenize_as_vllm_answers(ponder: str, tokenizer: Any) -> None:
    prompt = "347+589="
    ids = [int(i) for i in tokenizer(prompt)["input_ids"]]
    answer = post(ponder, "/tokenize", {"model": MODEL, "prompt": prompt}).json()
    assert answer == {"count": len(ids), "max_model_len": 2048, "tokens": ids, "token_strs": None}
    strs = post(ponder, "/tokenize", {"prompt": prompt, "return_token_strs": True}).json()
    assert strs["token_strs"] == tokenizer.convert_ids_to_tokens(ids)
    messages = [{"role": "user", "content": prompt}]
    chat = post(ponder, "/tokenize", {"model": f"{MODEL}+g2", "messages": messages}).json()
    assert chat["tokens"] == chat_ids(tokenizer, messages)
    back = post(ponder, "/detokenize", {"model": MODEL, "tokens": ids}).json()
    assert back == {"prompt": tokenizer.decode(ids)}
    assert prompt in back["prompt"]


def test_tokenizer_route_errors(ponder: str) -> None:
    assert_error(post(ponder, "/tokenize", {"model": "nope", "prompt": "x"}), 404, "model")
    assert_error(post(ponder, "/tokenize", {"prompt": "x", "messages": []}), 400, None)
    assert_error(post(ponder, "/tokenize", {"model": MODEL}), 400, None)
    assert_error(post(ponder, "/detokenize", {"tokens": [10**9]}), 400, "tokens.0")
    assert_error(post(ponder, "/detokenize", {"tokens": "x"}), 400, "tokens")
    both = {"messages": [{"role": "user", "content": "1"}], "continue_final_message": True}
    assert_error(post(ponder, "/tokenize", both), 400, "continue_final_message")
    for path in ("/tokenize", "/detokenize"):
        reply = post(ponder, path, {"prompt": "x", "tokens": [1]}, headers={})
        assert_error(reply, 401, None)


def test_version_names_ponder_and_the_engine(ponder: str) -> None:
    answer = httpx.get(f"{ponder}/version", timeout=30).json()  # open, as /health is
    assert answer["version"] == "0.1.0"
    engine = {"engine": "transformers", "version": transformers.__version__}
    assert answer["engines"] == {MODEL: engine}


async def test_an_engine_without_a_tokenizer_is_a_400(make_client: Any) -> None:
    async with make_client() as (client, _):
        reply = await client.post("/tokenize", json={"prompt": "x"})
        assert reply.status_code == 400
        error = reply.json()["error"]
        assert (error["param"], error["code"]) == ("model", "unsupported")
        assert "'m'" in error["message"]
        counted = await client.post(
            "/v1/messages/count_tokens",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert counted.status_code == 400
        version = (await client.get("/version")).json()
        assert version["engines"] == {"m": {"engine": None, "version": None}}
