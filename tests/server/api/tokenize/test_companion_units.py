"""The companion routes' logic alone: input items of a tool conversation, and what an
in-process tokenizer refuses (the routes themselves: test_companion_routes.py)."""

from __future__ import annotations

import pytest

from scaffolds.errors import UnsupportedError
from server.api.responses.input_items import input_items_page
from server.pool.tokenizers import LocalTokenizer
from server.store.response_store import StoredResponse
from tests.server.conftest import ROOT

MODEL_DIR = ROOT / "scaffolds" / "models" / "ponder-addition"


def test_input_items_of_tool_calls() -> None:
    function = {"name": "weather", "arguments": '{"city": "Oslo"}'}
    conversation = [
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "function": function}]},
        {"role": "tool", "tool_call_id": "c1", "content": "4C"},
        {"role": "assistant", "content": "It is 4C."},
    ]
    page = input_items_page(StoredResponse("resp_x", 0.0, {}, conversation), order="asc")
    kinds = [(item["type"], item.get("role")) for item in page["data"]]
    assert kinds == [
        ("message", "system"),
        ("message", "user"),
        ("function_call", None),
        ("function_call_output", None),
    ]
    call, output = page["data"][2:]
    assert (call["call_id"], call["name"], call["arguments"]) == (
        "c1",
        "weather",
        '{"city": "Oslo"}',
    )
    assert (output["call_id"], output["output"]) == ("c1", "4C")
    assert call["id"].startswith("fc_") and output["id"].startswith("fco_")


async def test_a_local_tokenizer_refuses_a_request_template() -> None:
    local = LocalTokenizer(MODEL_DIR, "transformers")
    messages = [{"role": "user", "content": "1+1="}]
    with pytest.raises(UnsupportedError, match="chat_template"):
        await local.tokenize({"messages": messages, "chat_template": "{{ messages }}"})
