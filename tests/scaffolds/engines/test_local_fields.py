"""The in-process engine's request fields: each honoured as vLLM defines it, or refused.

The refusals and value checks are logic (:func:`check_fields`); the honoured fields are
checked on real models: the OpenAI penalties step by step against the tiny random
model's own logits, ``chat_template_kwargs`` through the thinking model's template, and
a direct :meth:`LocalEngine.generate` refuses what the server would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scaffolds.engines.local_fields import (
    ENGINE,
    HONOURED,
    INERT,
    REFUSED,
    OpenAIPenalties,
    check_fields,
)
from scaffolds.engines.messages import chat
from scaffolds.engines.protocol import GenerateRequest, SamplingParams
from scaffolds.errors import InvalidRequestError
from scaffolds.models import model_path

pytest.importorskip("torch")
pytest.importorskip("transformers")

from scaffolds.engines.local import LocalEngine

ON_VALUES: dict[str, Any] = {
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    "functions": [{"name": "f", "parameters": {}}],
    "tool_choice": "required",
    "function_call": {"name": "f"},
    "response_format": {"type": "json_object"},
    "structured_outputs": {"json": {"type": "object"}},
    "guided_json": {"type": "object"},
    "guided_regex": "[0-9]+",
    "guided_choice": ["a", "b"],
    "guided_grammar": "root ::= 'a'",
    "guided_decoding_backend": "xgrammar",
    "guided_whitespace_pattern": " ",
    "logprobs": True,
    "top_logprobs": 3,
    "prompt_logprobs": 1,
    "echo": True,
    "suffix": "!",
    "best_of": 4,
    "use_beam_search": True,
    "length_penalty": 0.5,
    "stop_token_ids": [5],
    "include_stop_str_in_output": True,
    "skip_special_tokens": False,
    "spaces_between_special_tokens": False,
    "continue_final_message": True,
    "add_generation_prompt": False,
    "modalities": ["text", "audio"],
    "audio": {"voice": "alloy", "format": "wav"},
}
"""A value that asks for something, for each refused field."""


def test_every_refused_field_is_refused_by_name() -> None:
    assert set(ON_VALUES) == set(REFUSED)
    for name, value in ON_VALUES.items():
        with pytest.raises(InvalidRequestError) as caught:
            check_fields({name: value})
        assert caught.value.param == name and caught.value.code == "unsupported_parameter"
        assert caught.value.message.startswith(f"{name} is not supported by {ENGINE}: ")


def test_a_field_it_does_not_know_is_refused_not_ignored() -> None:
    with pytest.raises(InvalidRequestError, match="does not know the field 'mirostat'") as caught:
        check_fields({"mirostat": 2})
    assert caught.value.param == "mirostat"


def test_off_values_and_inert_fields_ask_for_nothing() -> None:
    check_fields(
        {
            "tools": [],
            "tool_choice": "none",
            "functions": None,
            "response_format": {"type": "text"},
            "logprobs": False,
            "top_logprobs": 0,
            "echo": False,
            "best_of": 1,
            "skip_special_tokens": True,
            "add_generation_prompt": True,
            "modalities": ["text"],
            "parallel_tool_calls": False,
            "mirostat": None,
        }
        | dict.fromkeys(INERT, "x")
    )


def test_a_completions_logprobs_of_zero_asks_for_logprobs() -> None:
    with pytest.raises(InvalidRequestError, match="logprobs"):
        check_fields({"logprobs": 0})


def test_a_named_tool_choice_is_the_field_named() -> None:
    choice = {"type": "function", "function": {"name": "f"}}
    with pytest.raises(InvalidRequestError, match="cannot force a tool call") as caught:
        check_fields({"tools": ON_VALUES["tools"], "tool_choice": choice})
    assert caught.value.param == "tool_choice"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("presence_penalty", 2.5),
        ("frequency_penalty", "1"),
        ("repetition_penalty", 0),
        ("min_p", 1.5),
        ("top_k", -2),
        ("min_tokens", -1),
        ("logit_bias", {"a": 1}),
        ("logit_bias", {"3": 101}),
        ("chat_template_kwargs", ["enable_thinking"]),
        ("chat_template_kwargs", {"add_generation_prompt": False}),
        ("chat_template_kwargs", {"tools": []}),
    ],
)
def test_an_honoured_field_with_a_bad_value_is_a_400_naming_it(name: str, value: Any) -> None:
    assert name in HONOURED
    with pytest.raises(InvalidRequestError) as caught:
        check_fields({name: value})
    assert caught.value.param == name and "must be" in caught.value.message


def test_the_penalties_count_the_output_only() -> None:
    import torch

    ids = torch.tensor([[5, 5, 5, 7, 7, 3], [5, 6, 6, 6, 6, 6]])
    scores = OpenAIPenalties(3, presence=0.25, frequency=1.0)(ids, torch.zeros(2, 8))
    assert scores[0].tolist() == [0, 0, 0, -1.25, 0, 0, 0, -2.25]
    assert scores[1].tolist() == [0, 0, 0, 0, 0, 0, -3.25, 0]


@pytest.fixture
async def tiny_engine(tiny_model_dir: Path) -> Any:
    engine = LocalEngine(tiny_model_dir, threads=1)
    assert await engine.health()
    yield engine
    await engine.aclose()


async def test_greedy_steps_follow_the_penalised_logits(tiny_engine: LocalEngine) -> None:
    """Each greedy token is the argmax of the model's logits less the penalties of the
    output so far (vLLM's definition), recomputed here with plain forward passes."""
    import torch

    extra = {"presence_penalty": 1.5, "frequency_penalty": 2.0, "ignore_eos": True}
    params = SamplingParams(max_tokens=10, temperature=0.0, logprobs=True, extra=extra)
    result = await tiny_engine.generate(GenerateRequest("12+3=", params))
    plain = await tiny_engine.generate(GenerateRequest("12+3=", params.replace(extra={})))
    prompt = list(result.prompt_token_ids or ())
    tokens = list(result.completions[0].token_ids or ())
    assert len(tokens) == 10 and tokens != list(plain.completions[0].token_ids or ())
    for step, token in enumerate(tokens):
        with torch.inference_mode():
            logits = tiny_engine._model(input_ids=torch.tensor([prompt + tokens[:step]])).logits
        counts = torch.bincount(
            torch.tensor(tokens[:step], dtype=torch.long), minlength=logits.shape[-1]
        ).float()
        penalised = logits[0, -1].float() - 2.0 * counts - 1.5 * (counts > 0).float()
        assert int(penalised.argmax()) == token, f"step {step}"


async def test_chat_template_kwargs_reach_the_template() -> None:
    """The thinking model's template closes the thinking block when ``enable_thinking``
    is false (what a helper step's ``thinking_off`` sends): as vLLM renders it."""
    engine = LocalEngine(model_path("ponder-addition-think"), threads=1)
    try:
        params = SamplingParams(max_tokens=1, temperature=0.0)
        off = params.replace(extra={"chat_template_kwargs": {"enable_thinking": False}})
        on = await engine.generate(GenerateRequest(chat("1+2="), params))
        closed = await engine.generate(GenerateRequest(chat("1+2="), off))
        tokenizer: Any = engine._tokenizer
        assert tokenizer.decode(list(closed.prompt_token_ids or ())) == "1+2=<think></think>"
        assert tokenizer.decode(list(on.prompt_token_ids or ())) == "1+2="
    finally:
        await engine.aclose()


async def test_a_direct_call_refuses_what_the_server_would(tiny_engine: LocalEngine) -> None:
    params = SamplingParams(extra={"response_format": {"type": "json_object"}})
    with pytest.raises(InvalidRequestError) as caught:
        await tiny_engine.generate(GenerateRequest("1+2=", params))
    assert caught.value.param == "response_format" and tiny_engine.calls_started == 0
